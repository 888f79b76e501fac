/* Private to gpu/: the threads on which the backend does its CPU work for a batch (completing queries
 * answered on resident prefixes, answering what the device could not), all of them at once instead of
 * one after the other on the thread that completes the batch. */
#ifndef ISN_GPU_CPU_CREW_H
#define ISN_GPU_CPU_CREW_H

#include <stdint.h>

#include "gpu/device.h"
#include "gpu/prefix_completion.h"
#include "index/index.h"
#include "ranking/ranking.h"

/* One thread's scratch: a searcher and room for one query's hits. */
typedef struct {
    isn_searcher *searcher;
    isn_hit *suffix_hits, *merge_scratch; /* max_k entries each */
} cpu_hand;

typedef struct cpu_crew cpu_crew;

/* threads: how many run the tasks, the caller of cpu_crew_run included (1: the caller alone). NULL
 * when out of memory or a thread cannot start. */
cpu_crew *cpu_crew_new(const isn_index *index, uint32_t threads, uint32_t max_k);
void cpu_crew_free(cpu_crew *crew);
uint32_t cpu_crew_threads(const cpu_crew *crew);

typedef void (*cpu_task)(void *context, uint32_t index, cpu_hand *hand);

/* Runs task(context, i, hand) for every i in [0, n) on the crew and the calling thread; returns when all
 * are done. One run at a time (the backend's batches complete under its caller's lock). */
void cpu_crew_run(cpu_crew *crew, uint32_t n, cpu_task task, void *context);

#endif
