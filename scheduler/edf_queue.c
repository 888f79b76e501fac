/* Earliest-deadline-first queue: a binary min-heap on (deadline, arrival), bounded. */
#include <stdlib.h>

#include "scheduler/scheduler_internal.h"

int isn_edf_init(isn_edf_queue *queue, uint32_t capacity) {
    queue->heap = calloc(capacity ? capacity : 1, sizeof *queue->heap);
    queue->keys = calloc(capacity ? capacity : 1, sizeof *queue->keys);
    queue->seq = calloc(capacity ? capacity : 1, sizeof *queue->seq);
    queue->size = 0;
    queue->capacity = capacity;
    queue->next_seq = 0;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) queue->backlog_ns[d] = 0;
    if (!queue->heap || !queue->keys || !queue->seq) {
        isn_edf_destroy(queue);
        return -1;
    }
    return 0;
}

void isn_edf_destroy(isn_edf_queue *queue) {
    free(queue->heap);
    free(queue->keys);
    free(queue->seq);
    queue->heap = NULL;
    queue->keys = queue->seq = NULL;
    queue->size = queue->capacity = 0;
}

static bool before(const isn_edf_queue *q, uint32_t a, uint32_t b) {
    return q->keys[a] < q->keys[b] || (q->keys[a] == q->keys[b] && q->seq[a] < q->seq[b]);
}

static void swap(isn_edf_queue *q, uint32_t a, uint32_t b) {
    isn_job *job = q->heap[a];
    q->heap[a] = q->heap[b];
    q->heap[b] = job;
    uint64_t key = q->keys[a];
    q->keys[a] = q->keys[b];
    q->keys[b] = key;
    uint64_t seq = q->seq[a];
    q->seq[a] = q->seq[b];
    q->seq[b] = seq;
}

static void sift_up(isn_edf_queue *q, uint32_t at) {
    while (at > 0) {
        uint32_t parent = (at - 1) / 2;
        if (!before(q, at, parent)) break;
        swap(q, at, parent);
        at = parent;
    }
}

static void sift_down(isn_edf_queue *q, uint32_t at) {
    for (;;) {
        uint32_t child = 2 * at + 1, best = at;
        if (child < q->size && before(q, child, best)) best = child;
        if (child + 1 < q->size && before(q, child + 1, best)) best = child + 1;
        if (best == at) return;
        swap(q, at, best);
        at = best;
    }
}

bool isn_edf_push(isn_edf_queue *queue, isn_job *job) {
    if (queue->size >= queue->capacity) return false;
    uint32_t at = queue->size++;
    queue->heap[at] = job;
    queue->keys[at] = job->deadline_ns ? job->deadline_ns : UINT64_MAX;
    queue->seq[at] = queue->next_seq++;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) queue->backlog_ns[d] += job->predicted_ns[d];
    sift_up(queue, at);
    return true;
}

isn_job *isn_edf_peek(const isn_edf_queue *queue) { return queue->size ? queue->heap[0] : NULL; }

isn_job *isn_edf_at(const isn_edf_queue *queue, uint32_t i) { return i < queue->size ? queue->heap[i] : NULL; }

isn_job *isn_edf_remove_at(isn_edf_queue *queue, uint32_t i) {
    if (i >= queue->size) return NULL;
    isn_job *job = queue->heap[i];
    uint32_t last = --queue->size;
    if (i != last) {
        swap(queue, i, last);
        sift_down(queue, i);
        sift_up(queue, i);
    }
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        queue->backlog_ns[d] -= job->predicted_ns[d];
        if (queue->size == 0 || queue->backlog_ns[d] < 0) queue->backlog_ns[d] = 0; /* rounding drift */
    }
    return job;
}

isn_job *isn_edf_pop(isn_edf_queue *queue) { return isn_edf_remove_at(queue, 0); }
