/* A loop's completion queue: workers and GPU dispatchers push finished jobs (a Treiber stack); the
 * loop takes them in the order they finished, before each poll and when woken, a bounded number at a
 * time (the rest wait on the loop's own list, and keep it from blocking).
 *
 * A push wakes the loop only when the loop may be blocked in its poll: it has said so
 * (completion_queue_may_poll, with the queue empty) and not yet returned (completion_queue_polled),
 * and the push found the queue empty. A busy loop takes what came before its next poll, at no cost to
 * anyone; only an idle loop is woken, by an eventfd write that it reads back.
 *
 * Why not uv_async_send: its sender marks the handle busy, writes the eventfd, then marks it done,
 * and the woken loop spins (then yields) while the mark says busy. A loop thread on its waker's core,
 * with the short slice it takes (server.loop_slice), preempts the waker inside that write, so the loop
 * spins until the kernel runs the waker again, a context switch each way, once per wake; under load
 * that was about a tenth of a loop's time. Here the queue is what they share, and nobody waits.
 *
 * Why a wake is never lost: the loop stores loop_polling and then loads head; a pusher stores head and
 * then loads loop_polling; both sequentially consistent, so at least one sees the other's store. If
 * the loop sees the job it takes it before polling; if the pusher sees the flag it writes the eventfd,
 * which the poll reports. Only a push onto an empty queue need look: a job pushed onto others is taken
 * with them, and the first of them saw the flag (or was seen by the loop) itself. */
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon/search_job.h"

int completion_queue_init(completion_queue *queue, char *err, size_t err_len) {
    atomic_init(&queue->head, NULL);
    atomic_init(&queue->loop_polling, false);
    queue->taken = queue->taken_tail = NULL;
    queue->num_taken = 0;
    queue->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (queue->wake_fd < 0) return isn_error(err, err_len, "cannot make a loop's wake-up eventfd: %s", strerror(errno));
    return 0;
}

void completion_queue_close(completion_queue *queue) {
    if (queue->wake_fd >= 0) close(queue->wake_fd);
    queue->wake_fd = -1;
}

void completion_queue_push(completion_queue *queue, search_job *job) {
    search_job *head = atomic_load_explicit(&queue->head, memory_order_relaxed);
    do job->next = head;
    while (!atomic_compare_exchange_weak_explicit(&queue->head, &head, job, memory_order_seq_cst,
                                                  memory_order_relaxed));
    if (head || !atomic_load_explicit(&queue->loop_polling, memory_order_seq_cst)) return;
    uint64_t one = 1;
    /* EAGAIN: the counter is full, so the loop is woken anyway */
    while (write(queue->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {}
}

search_job *completion_queue_take(completion_queue *queue, size_t least, uint64_t behind_ns, uint64_t now_ns) {
    search_job *list = atomic_exchange_explicit(&queue->head, NULL, memory_order_acquire), *ordered = NULL;
    search_job *last = list;
    while (list) {
        search_job *next = list->next;
        list->next = ordered;
        ordered = list;
        list = next;
        queue->num_taken++;
    }
    if (ordered) { /* after what an earlier take left */
        if (queue->taken) queue->taken_tail->next = ordered;
        else queue->taken = ordered;
        queue->taken_tail = last;
    }
    size_t half = (queue->num_taken + 1) / 2, count = least;
    uint64_t oldest = queue->taken ? queue->taken->sched.finished_ns : 0;
    if (half > count && (behind_ns == 0 || (oldest && now_ns > oldest + behind_ns))) count = half;
    search_job *first = queue->taken, *end = NULL;
    for (search_job *job = first; job && count; job = job->next, count--) {
        end = job;
        queue->num_taken--;
    }
    if (!end) return NULL;
    queue->taken = end->next;
    if (!queue->taken) queue->taken_tail = NULL;
    end->next = NULL;
    return first;
}

bool completion_queue_may_poll(completion_queue *queue) {
    if (queue->taken) return false;
    atomic_store_explicit(&queue->loop_polling, true, memory_order_seq_cst);
    if (!atomic_load_explicit(&queue->head, memory_order_seq_cst)) return true;
    atomic_store_explicit(&queue->loop_polling, false, memory_order_relaxed);
    return false;
}

void completion_queue_polled(completion_queue *queue) {
    atomic_store_explicit(&queue->loop_polling, false, memory_order_relaxed);
}

void completion_queue_clear_wake(completion_queue *queue) {
    uint64_t count;
    while (read(queue->wake_fd, &count, sizeof count) < 0 && errno == EINTR) {}
}

bool completion_queue_loop_idle(completion_queue *queue) {
    return atomic_load_explicit(&queue->loop_polling, memory_order_relaxed);
}
