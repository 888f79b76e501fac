/* The ISN_GPU_* switches that exist to compare and measure (bench/gpu_device.sh), read the same way by the
 * CUDA device and the emulated one. */
#include <stdlib.h>

#include "gpu/device.h"

uint32_t gpu_env_number(const char *name, uint32_t otherwise, uint32_t least) {
    const char *value = getenv(name);
    if (value == NULL || *value == '\0') return otherwise;
    char *end = NULL;
    const long n = strtol(value, &end, 10);
    return *end == '\0' && n >= (long)least && n < 2147483648L ? (uint32_t)n : otherwise;
}

gpu_bound_pass_switches gpu_bound_pass_switches_read(void) {
    return (gpu_bound_pass_switches){.on = gpu_env_number("ISN_GPU_BOUND_PASS", 1, 0) != 0,
                                     .filtered = gpu_env_number("ISN_GPU_BOUND_PASS_FILTERED", 1, 0) != 0,
                                     .max_k = gpu_env_number("ISN_GPU_BOUND_MAX_K", GPU_BOUND_MAX_K, 0)};
}
