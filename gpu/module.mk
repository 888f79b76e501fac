# Without CUDA only the no-GPU backend is built; with it the CUDA backend too.
GPU_SRCS := $(wildcard gpu/*.c)
ifeq ($(CUDA),1)
GPU_SRCS += $(wildcard gpu/*.cu)
endif
GPU_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.o,$(GPU_SRCS:%.c=$(BUILD)/obj/%.o))
GPU_LIB  := $(BUILD)/lib/libisn_gpu.a
$(GPU_LIB): $(GPU_OBJS)
# Before ranking and index in link order: the backend's CPU fallback calls them.
LIBS := $(GPU_LIB) $(LIBS)
# The second-stage pass computes features and transforms with the CPU's own code: without fused
# multiply-add, or it would round differently (ranking/feature_rows.h).
$(BUILD)/obj/gpu/l2_pass_kernels.o: NVCCFLAGS += -fmad=false

# make gpu-alloc-stall [GIB=26]: how long taking and giving back a partition's device memory holds up
# another thread's kernel launches, one cudaMalloc/cudaFree against gpu_region's pieces, and pinning the
# upload's 64 MiB staging buffer (gpu/probes/alloc_stall.cu). Needs a GPU; prints JSON lines.
ifeq ($(CUDA),1)
$(BUILD)/bench/gpu_alloc_stall: $(BUILD)/obj/gpu/probes/alloc_stall.o $(GPU_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
gpu-alloc-stall: $(BUILD)/bench/gpu_alloc_stall
	$< $(or $(GIB),26)
else
gpu-alloc-stall:
	@echo "gpu-alloc-stall: needs CUDA (nvcc not found, or CUDA=0)" >&2; exit 2
endif
.PHONY: gpu-alloc-stall
