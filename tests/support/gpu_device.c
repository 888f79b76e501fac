#include "tests/support/gpu_device.h"

#include <stdio.h>

#include "gpu/gpu.h"

bool support_have_gpu(void) {
    char err[256];
    if (isn_gpu_device_count(err, sizeof err) > 0) return true;
    printf("real-GPU checks skipped: no GPU (%s backend: %s)\n", isn_gpu_backend_name(), err);
    return false;
}
