/* ISN GPU backend interface. The one public header of gpu/.
 * Built with CUDA (make CUDA=1, the default when nvcc is found) it talks to the devices; built without,
 * the no-GPU backend reports zero devices and everything runs on the CPU. */
#ifndef ISN_GPU_H
#define ISN_GPU_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int ordinal;
    char name[256];
    uint64_t memory_bytes;
    int compute_major;
    int compute_minor;
    int multiprocessors;
} isn_gpu_device_info;

/* "cuda" or "none". */
const char *isn_gpu_backend_name(void);

/* Number of usable devices; 0 without CUDA, without a driver or without a GPU (then err says why). */
int isn_gpu_device_count(char *err, size_t err_len);

/* 0, or -1 with err. */
int isn_gpu_device_info_get(int ordinal, isn_gpu_device_info *info, char *err, size_t err_len);

/* Runs a small kernel on the device and checks its result: proves the build, the driver and the device
 * work together. 0, or -1 with err. */
int isn_gpu_self_test(int ordinal, char *err, size_t err_len);

#endif
