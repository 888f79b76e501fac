// How long taking a partition's device memory holds up another thread's kernel launches: a serving
// thread launches an empty kernel and waits for it, over and over, while the main thread takes and gives
// back GIB of device memory, once with cudaMalloc/cudaFree and once in pieces (gpu_region), then pins and
// unpins a 64 MiB host buffer as the upload's staging did per upload. Usage: gpu_alloc_stall [GIB]
#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include "gpu/device_memory.h"
__global__ void empty_kernel() {}
static double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char **argv) {
    size_t bytes = (size_t)(argc > 1 ? atof(argv[1]) : 26.0) * (1ull << 30);
    cudaSetDevice(0);
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    empty_kernel<<<1, 32, 0, s>>>(); cudaStreamSynchronize(s);
    std::atomic<bool> stop{false};
    std::vector<std::pair<double, double>> lat; lat.reserve(1 << 22);
    std::thread server([&] {
        cudaSetDevice(0);
        while (!stop) { double t = now_ms(); empty_kernel<<<1, 32, 0, s>>>(); cudaStreamSynchronize(s); lat.push_back({t, now_ms() - t}); }
    });
    auto window = [&](double from, double to) {
        std::vector<double> v; for (auto &p : lat) if (p.first >= from && p.first < to) v.push_back(p.second);
        std::sort(v.begin(), v.end()); double mx = v.empty() ? 0 : v.back();
        double p99 = v.empty() ? 0 : v[(size_t)(0.99 * (v.size() - 1))];
        printf("launches %zu, p99 %.3f ms, max %.3f ms", v.size(), p99, mx);
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int round = 0; round < 2; round++) {
        for (int gentle = 0; gentle < 2; gentle++) {
            double t0 = now_ms(); void *p = nullptr; gpu_region r; cudaError_t e;
            if (gentle) e = gpu_region_alloc(&r, bytes, 0); else e = cudaMalloc(&p, bytes);
            double t1 = now_ms();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            double t2 = now_ms();
            if (gentle) gpu_region_free(&r); else cudaFree(p);
            double t3 = now_ms();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            printf("{\"round\":%d,\"gentle\":%d,\"gib\":%.1f,\"alloc_ms\":%.1f,\"free_ms\":%.1f,\"error\":\"%s\"}\n  during alloc: ", round, gentle,
                   bytes / 1073741824.0, t1 - t0, t3 - t2, cudaGetErrorString(e));
            window(t0, t1); printf("\n  during free:  "); window(t2, t3); printf("\n  idle between: "); window(t1 + 10, t2); printf("\n");
        }
    }
    for (int round = 0; round < 2; round++) { // the upload's two pinned staging buffers, taken and given back
        double t0 = now_ms(); void *h = nullptr; cudaError_t e = cudaMallocHost(&h, 64u << 20); double t1 = now_ms();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        double t2 = now_ms(); cudaFreeHost(h); double t3 = now_ms();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        printf("{\"round\":%d,\"pinned_mib\":64,\"alloc_ms\":%.1f,\"free_ms\":%.1f,\"error\":\"%s\"}\n  during alloc: ", round, t1 - t0,
               t3 - t2, cudaGetErrorString(e));
        window(t0, t1); printf("\n  during free:  "); window(t2, t3); printf("\n");
    }
    stop = true; server.join();
    return 0;
}
