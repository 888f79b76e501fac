/* The GPU tests' one question about the machine: is there a real GPU to run their *_gpu cases on. */
#ifndef ISN_TESTS_SUPPORT_GPU_DEVICE_H
#define ISN_TESTS_SUPPORT_GPU_DEVICE_H

#include <stdbool.h>

/* True when the GPU backend sees a device; otherwise says why on stdout (the case then skips). */
bool support_have_gpu(void);

#endif
