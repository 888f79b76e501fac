/* The backend of a build without CUDA: no devices; every caller falls back to the CPU. */
#ifndef ISN_WITH_CUDA
#include <stdio.h>

#include "gpu/device.h"
#include "gpu/gpu.h"

const gpu_device_ops *gpu_cuda_device_ops(void) { return NULL; }

const char *isn_gpu_backend_name(void) { return "none"; }

int isn_gpu_device_count(char *err, size_t err_len) {
    snprintf(err, err_len, "built without CUDA");
    return 0;
}

int isn_gpu_device_info_get(int ordinal, isn_gpu_device_info *info, char *err, size_t err_len) {
    (void)info;
    snprintf(err, err_len, "no GPU device %d: built without CUDA", ordinal);
    return -1;
}

int isn_gpu_self_test(int ordinal, char *err, size_t err_len) {
    snprintf(err, err_len, "no GPU device %d: built without CUDA", ordinal);
    return -1;
}
#else
typedef int isn_no_gpu_backend_unused; /* ISO C forbids an empty translation unit */
#endif
