/* isnd's GPU set-up: what [gpu] asks for, opened before the scheduler starts. */
#ifndef ISN_DAEMON_GPU_SETUP_H
#define ISN_DAEMON_GPU_SETUP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "conf/conf.h"
#include "daemon/generation.h"
#include "gpu/gpu.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler.h"

/* Opens the [gpu] first-stage backends, one per device (gpu.devices of them from gpu.device on), each
 * holding the whole partition (uploads the postings, warms every kernel up; the training log's queries,
 * analysed with planner, choose what stays resident). A device that cannot be used is not an error:
 * the others serve, and with none the node serves on the CPU (*num_backends 0); the log says why. -1
 * with err only for a bad configuration. backends has room for ISN_SCHED_MAX_GPUS. The backends' CPU threads
 * run on the num_cpus CPUs listed in cpus (NULL: anywhere; isn_gpu_options.cpus). */
int gpu_setup_first_stage(const isn_index *index, const isn_conf *conf, isn_searcher *planner, const int *cpus,
                          uint32_t num_cpus, isn_gpu_backend **backends, uint32_t *num_backends, char *err, size_t err_len);
/* The devices the node will have, for the default loop and worker counts (server.loops = 0, search.workers =
 * 0) to leave them room: gpu.devices from gpu.device on when gpu.enable, as many of them as the machine has
 * (all when emulated), plus gpu.sim_devices. A node asking for a GPU on a machine without one is counted
 * as the CPU-only node it will be; one whose device fails later keeps the counts made for it. Asking the
 * machine initialises the GPU driver (once a process: isnd asks before its loops are made, and only when one of
 * the counts is left to the default). */
uint32_t gpu_setup_devices_expected(const isn_conf *conf);
/* Why the last gpu_setup_first_stage opened no device (the last device's reason), or "". */
const char *gpu_setup_unusable(void);
/* The first stage on the GPU as isnd serves it: one backend per device, each holding the postings
 * of one index generation (a reference kept on it), and a packer per device that turns the device's
 * hits into replies. Generation swaps: the next generation is staged beside the current one when
 * the devices can hold both, and the backends move to it once the jobs already bound for the GPU
 * (entered, not yet left) have ended; while they move, no job enters. */
typedef struct {
    index_generation *generation; /* NULL without a GPU first stage */
    atomic_bool moving;
    atomic_uint jobs;             /* bound for the GPU: entered, not left */
    /* The staged generation the devices move to next, from its staging until the move ends: its jobs
     * wait for the move (briefly) rather than run on the CPU workers, where on a large partition one
     * query costs hundreds of the GPU's. */
    const index_generation *_Atomic awaited;
    isn_gpu_backend *backends[ISN_SCHED_MAX_GPUS]; /* NULL: none uploaded (yet) */
    uint32_t num_backends;        /* the scheduler's devices */
    atomic_uint attached;         /* devices holding a generation (backends not NULL) */
    /* Until the first generation's upload ends (gpu.upload_before_ready = false): the devices have no
     * backend and the CPU workers serve every query. */
    atomic_bool uploading;
    _Atomic uint64_t attached_ns; /* when that upload ended (isn_now_ns), 0 before */
    isn_gpu_backend *staged[ISN_SCHED_MAX_GPUS]; /* the next generation's, uploaded before the switch */
    uint32_t num_staged;
    search_worker *packers[ISN_SCHED_MAX_GPUS];
    int *cpus; /* where the backends' CPU threads run (server.pin_loops: the workers' CPUs); NULL: anywhere */
    uint32_t num_cpus;
} gpu_first_stage;

/* Opens [gpu]'s devices for `first` (gpu_setup_first_stage; none is not an error). -1 with err. With
 * gpu.upload_before_ready = false the devices open without a backend (checked, not uploaded): the first
 * gpu_first_stage_move uploads `first`, while the node already serves on the CPU. Every backend it opens, now or
 * at a move, runs its CPU threads on the num_cpus CPUs listed in cpus (copied; NULL: anywhere). */
int gpu_first_stage_open(gpu_first_stage *gpu, index_generation *first, const isn_conf *conf, isn_searcher *planner,
                         const int *cpus, uint32_t num_cpus, char *err, size_t err_len);
/* Whether the devices hold this generation's content (the same content hash counts). */
bool gpu_first_stage_holds(const gpu_first_stage *gpu, const index_generation *generation);
/* Counts a job bound for the GPU, of this generation: false (not counted) while the devices move or
 * hold another. A job of the generation they are about to move to (staged beside the current one)
 * waits for that move until wait_until_ns (isn_now_ns; 0: no wait). Every true is followed by one
 * gpu_first_stage_leave. */
bool gpu_first_stage_enter(gpu_first_stage *gpu, const index_generation *generation, uint64_t wait_until_ns);
void gpu_first_stage_leave(gpu_first_stage *gpu);
/* Uploads `next` beside the current generation: 1 when every device holds both now, 0 when they must
 * free first (logged) or there is nothing to do. */
int gpu_first_stage_stage(gpu_first_stage *gpu, const isn_conf *conf, index_generation *next);
/* Moves the devices to `next` (staged, or freed and uploaded), between the scheduler's batches; the
 * first upload after an open without one too. */
void gpu_first_stage_move(gpu_first_stage *gpu, isn_scheduler *scheduler, const isn_conf *conf, index_generation *next);
/* Closes the backends and packers and drops the generation, once the scheduler no longer uses them. */
void gpu_first_stage_close(gpu_first_stage *gpu);

/* The second stage's GPU model cache, or NULL (not asked for, emulated device: no L2 kernels, or
 * none usable: logged). */
isn_gpu_l2 *gpu_setup_second_stage(const isn_conf *conf);

#endif
