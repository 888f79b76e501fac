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
