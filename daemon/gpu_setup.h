/* isnd's GPU set-up: what [gpu] asks for, opened before the scheduler starts. */
#ifndef ISN_DAEMON_GPU_SETUP_H
#define ISN_DAEMON_GPU_SETUP_H

#include <stddef.h>

#include "conf/conf.h"
#include "gpu/gpu.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler.h"

/* Opens the [gpu] first-stage backends, one per device (gpu.devices of them from gpu.device on), each
 * holding the whole partition (uploads the postings, warms every kernel up; the training log's queries,
 * analysed with planner, choose what stays resident). A device that cannot be used is not an error:
 * the others serve, and with none the node serves on the CPU (*num_backends 0); the log says why. -1
 * with err only for a bad configuration. backends has room for ISN_SCHED_MAX_GPUS. */
int gpu_setup_first_stage(const isn_index *index, const isn_conf *conf, isn_searcher *planner,
                          isn_gpu_backend **backends, uint32_t *num_backends, char *err, size_t err_len);
/* Why the last gpu_setup_first_stage opened no device (the last device's reason), or "". */
const char *gpu_setup_unusable(void);
/* The second stage's GPU model cache, or NULL (not asked for, emulated device: no L2 kernels, or
 * none usable: logged). */
isn_gpu_l2 *gpu_setup_second_stage(const isn_conf *conf, isn_l2_crossover *crossover);

#endif
