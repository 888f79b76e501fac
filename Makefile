# ISN top-level build. Each folder adds its sources, programs and tests in its module.mk.
#   make            build every program into build/bin
#   make test       build and run every test (CPU; GPU tests skip without a GPU)
#   make asan-test  the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench      run the benchmarks; JSON results land in build/bench/
#   make CUDA=0     force a CPU-only build even when nvcc is present

ifeq ($(origin CC),default)
CC = gcc
endif
NVCC    ?= nvcc
BUILD   ?= build
CUDA    ?= $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
SAN     ?=

OPT      = -O2
CPPFLAGS = -I. -I$(BUILD)/gen -D_GNU_SOURCE -MMD -MP
CFLAGS   = -std=c11 $(OPT) -g -march=x86-64-v2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -fno-strict-aliasing $(SAN)
LDFLAGS  = $(SAN)
LDLIBS   = -ljansson -lstemmer -lutf8proc -lxxhash -lm -lpthread

ifeq ($(SAN),)
LDLIBS  += -ljemalloc
endif

ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC)))
CPPFLAGS += -DISN_WITH_CUDA=1
NVCCFLAGS = -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -I. -Xcompiler -Wall,-Wextra,-Werror
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
endif

.SECONDEXPANSION:
PROGRAMS :=
TESTS    :=
LIBS     :=

all: programs

DEPS_STAMP := $(BUILD)/.deps-ok
$(DEPS_STAMP): tools/setup-deps.sh
	@mkdir -p $(BUILD)
	bash tools/setup-deps.sh
	@touch $@

include index/module.mk
include ranking/module.mk
include gpu/module.mk
-include proto/module.mk
-include conf/module.mk
-include scheduler/module.mk
-include daemon/module.mk
include tools/module.mk
include tests/module.mk
include bench/module.mk

programs: $(PROGRAMS)

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/lib/%.a:
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

test: $(TESTS) $(PROGRAMS)
	@bash tests/run-tests.sh $(TESTS)

asan-test:
	$(MAKE) BUILD=build-asan CUDA=0 OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

clean:
	rm -rf build build-asan

.SECONDARY:
.PHONY: all programs test asan-test bench clean
-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# The built-in sample: Debian's package descriptions, indexed with the default analyzer.
SAMPLE_INDEX := $(BUILD)/sample/index
$(SAMPLE_INDEX)/index.isn: $(BUILD)/bin/isn-index tools/make-sample.py
	@mkdir -p $(BUILD)/sample
	python3 tools/make-sample.py $(BUILD)/sample/packages.jsonl
	$(BUILD)/bin/isn-index build --quiet --input $(BUILD)/sample/packages.jsonl --out $(SAMPLE_INDEX)
sample-index: $(SAMPLE_INDEX)/index.isn

# The README's first command: everything set up, then isnd in the foreground on the sample.
run: programs sample-index
	@echo "isnd: serving the sample on 127.0.0.1:7070 (gRPC) and 127.0.0.1:9090 (stats). Try:"
	@echo "  $(BUILD)/bin/isn-query --server 127.0.0.1:7070 \"image editor\""
	@echo "  curl localhost:9090/metrics"
	exec $(BUILD)/bin/isnd --index $(SAMPLE_INDEX) --listen 127.0.0.1:7070 --stats-listen 127.0.0.1:9090
.PHONY: sample-index run
