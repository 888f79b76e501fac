// gpu_region (device_memory.h): CUDA's virtual memory management through the runtime's driver entry
// points, so that the static runtime needs no link to the driver library.
#include "gpu/device_memory.h"

#include "gpu/device.h"

#include <cuda.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

namespace {

// Pieces of this size (rounded to the device's granularity): each map or unmap holds the driver about
// as long as a batch's launches take.
constexpr size_t kPieceBytes = (size_t)256 << 20;

typedef CUresult (*address_reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*address_free_fn)(CUdeviceptr, size_t);
typedef CUresult (*mem_create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                  unsigned long long);
typedef CUresult (*mem_release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*mem_map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*mem_unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*mem_set_access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*granularity_fn)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);

struct vmm_api {
    address_reserve_fn address_reserve;
    address_free_fn address_free;
    mem_create_fn create;
    mem_release_fn release;
    mem_map_fn map;
    mem_unmap_fn unmap;
    mem_set_access_fn set_access;
    granularity_fn granularity;
    cudaError_t found;
};

vmm_api api;
pthread_once_t api_once = PTHREAD_ONCE_INIT;

template <typename F> bool entry(const char *name, F *fn) {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || p == nullptr)
        return false;
    *fn = reinterpret_cast<F>(p);
    return true;
}

void find_api() {
    bool ok = entry("cuMemAddressReserve", &api.address_reserve) && entry("cuMemAddressFree", &api.address_free) &&
              entry("cuMemCreate", &api.create) && entry("cuMemRelease", &api.release) &&
              entry("cuMemMap", &api.map) && entry("cuMemUnmap", &api.unmap) &&
              entry("cuMemSetAccess", &api.set_access) &&
              entry("cuMemGetAllocationGranularity", &api.granularity);
    api.found = ok ? cudaSuccess : cudaErrorNotSupported;
}

cudaError_t runtime_error(CUresult r) {
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    default: return cudaErrorUnknown;
    }
}

// Lets a thread waiting on the driver (a serving launch) in before the next piece.
void step_aside() {
    struct timespec pause = {0, 20 * 1000};
    nanosleep(&pause, nullptr);
}

void unmap_pieces(const gpu_region *region, size_t mapped) {
    const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(region->base);
    for (size_t off = 0; off < mapped; off += region->piece) {
        api.unmap(base + off, region->piece);
        step_aside();
    }
}

} // namespace

cudaError_t gpu_region_alloc(gpu_region *region, size_t bytes, int ordinal) {
    memset(region, 0, sizeof *region);
    const size_t pieces_from = (size_t)gpu_env_number("ISN_GPU_PIECES_FROM_MIB", GPU_PIECES_FROM_MIB, 0) << 20;
    if (bytes < pieces_from || bytes == 0) return cudaMalloc(&region->base, bytes ? bytes : 1);
    pthread_once(&api_once, find_api);
    if (api.found != cudaSuccess) return api.found;
    // a device without virtual memory management says so at cuMemCreate (CUDA_ERROR_NOT_SUPPORTED)
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    size_t granule = 0;
    CUresult r = api.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (r != CUDA_SUCCESS || granule == 0) return r != CUDA_SUCCESS ? runtime_error(r) : cudaErrorInvalidValue;
    const size_t piece = (kPieceBytes + granule - 1) / granule * granule;
    const size_t reserved = (bytes + piece - 1) / piece * piece;
    CUdeviceptr base = 0;
    r = api.address_reserve(&base, reserved, granule, 0, 0);
    if (r != CUDA_SUCCESS) return runtime_error(r);
    region->base = reinterpret_cast<void *>(base);
    region->reserved = reserved;
    region->piece = piece;
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t mapped = 0;
    for (; mapped < reserved; mapped += piece) {
        CUmemGenericAllocationHandle handle;
        r = api.create(&handle, piece, &prop, 0);
        if (r != CUDA_SUCCESS) break;
        r = api.map(base + mapped, piece, 0, handle, 0);
        // the mapping holds the memory from here on: unmapping it gives the memory back
        CUresult released = api.release(handle);
        if (r == CUDA_SUCCESS) r = released;
        if (r == CUDA_SUCCESS) r = api.set_access(base + mapped, piece, &access, 1);
        if (r != CUDA_SUCCESS) {
            api.unmap(base + mapped, piece);
            break;
        }
        step_aside();
    }
    if (r != CUDA_SUCCESS) {
        unmap_pieces(region, mapped);
        api.address_free(base, reserved);
        memset(region, 0, sizeof *region);
        return runtime_error(r);
    }
    return cudaSuccess;
}

void gpu_region_free(gpu_region *region) {
    if (region->base == nullptr) return;
    if (region->reserved == 0) {
        cudaFree(region->base);
    } else {
        unmap_pieces(region, region->reserved);
        api.address_free(reinterpret_cast<CUdeviceptr>(region->base), region->reserved);
    }
    memset(region, 0, sizeof *region);
}
