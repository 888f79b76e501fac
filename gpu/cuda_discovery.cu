// CUDA device discovery and a self-test kernel (the first-stage device is first_stage_device.cu).
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "gpu/gpu.h"
}

extern "C" const char *isn_gpu_backend_name(void) { return "cuda"; }

extern "C" int isn_gpu_device_count(char *err, size_t err_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "no usable GPU: %s", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0) snprintf(err, err_len, "no GPU device found");
    return n;
}

extern "C" int isn_gpu_device_info_get(int ordinal, isn_gpu_device_info *info, char *err, size_t err_len) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, ordinal);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "GPU %d: %s", ordinal, cudaGetErrorString(e));
        return -1;
    }
    memset(info, 0, sizeof *info);
    info->ordinal = ordinal;
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->memory_bytes = p.totalGlobalMem;
    info->compute_major = p.major;
    info->compute_minor = p.minor;
    info->multiprocessors = p.multiProcessorCount;
    return 0;
}

__global__ void square_plus_index(const unsigned *in, unsigned *out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * in[i] + i;
}

extern "C" int isn_gpu_self_test(int ordinal, char *err, size_t err_len) {
    const unsigned n = 4096;
    unsigned host_in[4096], host_out[4096];
    for (unsigned i = 0; i < n; i++) host_in[i] = i * 7u + 3u;
    unsigned *d_in = nullptr, *d_out = nullptr;
    cudaError_t e = cudaSetDevice(ordinal);
    if (e == cudaSuccess) e = cudaMalloc(&d_in, n * sizeof(unsigned));
    if (e == cudaSuccess) e = cudaMalloc(&d_out, n * sizeof(unsigned));
    if (e == cudaSuccess) e = cudaMemcpy(d_in, host_in, n * sizeof(unsigned), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        square_plus_index<<<(n + 255) / 256, 256>>>(d_in, d_out, n);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(host_out, d_out, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    cudaFree(d_in);
    cudaFree(d_out);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "GPU %d self-test: %s", ordinal, cudaGetErrorString(e));
        return -1;
    }
    for (unsigned i = 0; i < n; i++)
        if (host_out[i] != host_in[i] * host_in[i] + i) {
            snprintf(err, err_len, "GPU %d self-test: wrong result at %u", ordinal, i);
            return -1;
        }
    return 0;
}
