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
