// Device memory for a partition, taken and given back in pieces (internal to gpu/).
//
// A device already serving one generation stages the next beside it during a swap. One cudaFree of a
// partition's tens of gigabytes, and to a lesser degree one cudaMalloc of them, holds the driver while
// the pages are (un)mapped, and the serving threads can launch nothing meanwhile: their batches stall
// and admission refuses what arrives. Through CUDA's virtual memory management the range is reserved
// once and backed piece by piece, each call short, so the serving threads' launches go in between.
// gpu/probes/alloc_stall.cu measures both ways (make gpu-alloc-stall).
#ifndef ISN_GPU_DEVICE_MEMORY_H
#define ISN_GPU_DEVICE_MEMORY_H

#include <cuda_runtime.h>
#include <stddef.h>

// Below this many MiB a region is one cudaMalloc: its mapping is short. ISN_GPU_PIECES_FROM_MIB lowers it
// (0: every region in pieces), so that the tests run the pieced path on a small index.
#define GPU_PIECES_FROM_MIB 256

typedef struct {
    void *base;
    size_t reserved; // bytes of address range (a multiple of the piece), 0 for a cudaMalloc'd region
    size_t piece;
} gpu_region;

// bytes of device memory on ordinal at region->base, readable and writable by kernels on that device.
cudaError_t gpu_region_alloc(gpu_region *region, size_t bytes, int ordinal);
// Gives the memory back piece by piece (cudaFree for a small region); region zeroed. NULL base: nothing.
void gpu_region_free(gpu_region *region);

#endif
