/* GPU backend: skips, saying so, where no GPU is present (CI); on a GPU checks discovery and a kernel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"

static void test_devices_and_kernel(void **state) {
    (void)state;
    char err[256] = "";
    int n = isn_gpu_device_count(err, sizeof err);
    if (n == 0) {
        printf("GPU tests skipped: no GPU (%s backend: %s)\n", isn_gpu_backend_name(), err);
        assert_int_equal(isn_gpu_device_info_get(0, &(isn_gpu_device_info){0}, err, sizeof err), -1);
        skip();
    }
    for (int d = 0; d < n; d++) {
        isn_gpu_device_info info;
        assert_int_equal(isn_gpu_device_info_get(d, &info, err, sizeof err), 0);
        printf("GPU %d: %s, %.1f GiB, compute %d.%d, %d SMs\n", d, info.name, (double)info.memory_bytes / (1 << 30),
               info.compute_major, info.compute_minor, info.multiprocessors);
        assert_true(info.memory_bytes > 0);
        if (isn_gpu_self_test(d, err, sizeof err) != 0) fail_msg("%s", err);
    }
    assert_int_equal(isn_gpu_device_info_get(n + 7, &(isn_gpu_device_info){0}, err, sizeof err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_devices_and_kernel)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
