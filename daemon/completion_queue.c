/* A loop's completion queue: workers and GPU dispatchers push finished jobs (a Treiber stack) and
 * wake the loop; the loop takes them all at once, in the order they finished. Only the push that
 * finds the queue empty wakes it: a job pushed onto others is taken with them, by the take that the
 * wake of the first of them brings about (the take empties the queue, so the next push wakes again).
 * Each wake costs the pusher an eventfd write and the loop its read (libuv's uv_async_send). */
#include "daemon/search_job.h"

void completion_queue_push(completion_queue *queue, search_job *job) {
    search_job *head = atomic_load_explicit(&queue->head, memory_order_relaxed);
    do job->next = head;
    while (!atomic_compare_exchange_weak_explicit(&queue->head, &head, job, memory_order_release,
                                                  memory_order_relaxed));
    if (!head) uv_async_send(queue->wake);
}

search_job *completion_queue_take(completion_queue *queue) {
    search_job *list = atomic_exchange_explicit(&queue->head, NULL, memory_order_acquire), *ordered = NULL;
    while (list) {
        search_job *next = list->next;
        list->next = ordered;
        ordered = list;
        list = next;
    }
    return ordered;
}
