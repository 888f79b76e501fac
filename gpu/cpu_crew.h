/* Private to gpu/: the threads on which the backend does its CPU work for batches (completing queries
 * answered on resident prefixes, answering what the device could not), all of them at once instead of
 * one after the other on the thread that completes the batch, and from a batch's submission on for the
 * queries the device refuses. */
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

/* threads: how many run the tasks, the caller of cpu_crew_run included (1: the caller alone). The crew's
 * own threads (named isn-crew-N) run on the num_cpus CPUs listed in cpus (NULL: wherever the caller may).
 * NULL when out of memory or a thread cannot start. */
cpu_crew *cpu_crew_new(const isn_index *index, uint32_t threads, uint32_t max_k, const int *cpus, uint32_t num_cpus);
void cpu_crew_free(cpu_crew *crew);
uint32_t cpu_crew_threads(const cpu_crew *crew);

typedef void (*cpu_task)(void *context, uint32_t index, cpu_hand *hand);

/* A run of n tasks task(context, i, hand), i in [0, n): the caller's, which it keeps until cpu_crew_finish
 * returns. The crew takes the runs in the order they started, a task at a time. */
typedef struct cpu_run {
    cpu_task task;
    void *context;
    uint32_t n, next, done; /* tasks; handed out; finished (under the crew's lock) */
    struct cpu_run *queued; /* the next run with tasks left to hand out */
} cpu_run;

/* Starts a run on the crew's threads and returns at once: its tasks go on while the caller does something
 * else (a batch's CPU fallbacks while the device works on the rest). */
void cpu_crew_start(cpu_crew *crew, cpu_run *run, uint32_t n, cpu_task task, void *context);
/* Takes the run's tasks not yet handed out on the calling thread too, then returns when all are done. The
 * caller's tasks run on its own hand: one caller of cpu_crew_finish (or cpu_crew_run) at a time (the
 * backend's batches are submitted and completed under its caller's lock). */
void cpu_crew_finish(cpu_crew *crew, cpu_run *run);
/* cpu_crew_start, then cpu_crew_finish. */
void cpu_crew_run(cpu_crew *crew, uint32_t n, cpu_task task, void *context);

#endif
