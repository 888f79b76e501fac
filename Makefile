# ISN top-level build. Each folder adds its sources, programs and tests in its module.mk.
#   make            build every program into build/bin
#   make test       build and run every test (CPU; GPU tests skip without a GPU)
#   make asan-test  the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       the libFuzzer targets of tests/fuzz, FUZZ_SECONDS each (clang)
#   make bench      run the benchmarks; JSON results land in build/bench/
#   make CUDA=0     force a CPU-only build even when nvcc is present
#   make gpu-test   only the GPU tests; make CUDA=1 STATIC=1 BUILD=build-gpu: binaries for the GPU machine

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
LDLIBS   = -ljansson -lstemmer -lutf8proc -lxxhash -llz4 -lm -lpthread

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

include base/module.mk
include index/module.mk
include ranking/module.mk
include gpu/module.mk
-include proto/module.mk
-include conf/module.mk
-include scheduler/module.mk
include grpc/module.mk
-include agg/module.mk
-include daemon/module.mk
include tools/module.mk
include tests/module.mk
include tests/fuzz/module.mk
include bench/module.mk
-include deploy/module.mk
LIBS += $(BASE_LIB)
# DESIGN.md section 3's include rules, and a test of that check: run with the test programs, so a
# violation fails `make test` and names the include.
TESTS += tools/check-layout.sh tests/unit/check_layout_test.sh

# make CUDA=1 STATIC=1: binaries for the GPU machine, which lacks these libraries: Debian's static archives
# linked in; glibc, and libsystemd and libcmocka (no archives), stay dynamic.
ifeq ($(STATIC),1)
STATIC_LIBS := -ljansson -lstemmer -lutf8proc -lxxhash -llz4 -ljemalloc -lnghttp2 -lprotobuf-c -linih
STATIC_LIBS += -lcares -lssl -lcrypto
LDLIBS := -Wl,--as-needed -Wl,-Bstatic $(STATIC_LIBS) -luv_a -Wl,-Bdynamic $(filter-out $(STATIC_LIBS) -luv,$(LDLIBS))
endif

# The GPU tests alone; on a machine without a GPU their device checks skip and say so.
GPU_TESTS := $(filter $(BUILD)/tests/test_gpu%,$(TESTS))
gpu-test: $(GPU_TESTS)
	@bash tests/run-tests.sh $(GPU_TESTS)

programs: $(PROGRAMS)

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/lib/%.a:
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

# Cranfield as JSON Lines, from ../shared/data when it is there (the cluster test uses it; else it makes
# a synthetic corpus and says so).
CRANFIELD := $(BUILD)/data/cran/cranfield.jsonl
$(CRANFIELD):
	@if [ -f ../shared/data/build_corpus.py ]; then python3 ../shared/data/build_corpus.py cranfield $(dir $@) >/dev/null; \
	else echo "no ../shared/data: tests that use Cranfield fall back to synthetic data"; fi

test: $(TESTS) $(PROGRAMS) $(CRANFIELD)
	@ISN_CRANFIELD_DIR=$(BUILD)/data/cran bash tests/run-tests.sh $(TESTS)

# ASan keeps its own SIGSEGV handler: cmocka's would take a crash in a test's worker thread for its own and exit(-1)
# without a word, where ASan reports the fault and its stack.
asan-test:
	ASAN_OPTIONS=allow_user_segv_handler=0$${ASAN_OPTIONS:+:$$ASAN_OPTIONS} $(MAKE) BUILD=build-asan CUDA=0 OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

# The deque, completion queue, scheduler and GPU backend tests under ThreadSanitizer (lock-free code, worker and dispatcher
# threads, the backend's CPU crew; the GPU backend runs its emulated device), and isnd with several event
# loops (replies crossing from the workers to the loop that owns each stream; the daemon is built with it).
TSAN_TESTS := test_deque test_completion_queue test_idle_workers test_scheduler test_gpu_backend test_gpu_cpu_crew test_isnd_loops
tsan-test:
	$(MAKE) BUILD=build-tsan CUDA=0 OPT=-O1 SAN="-fsanitize=thread" $(TSAN_TESTS:%=build-tsan/tests/%) build-tsan/bin/isnd
	set -e; for t in $(TSAN_TESTS); do TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/$$t; done
.PHONY: tsan-test

clean:
	rm -rf build build-asan

.SECONDARY:
.PHONY: all programs test asan-test bench clean gpu-test
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

# make install [PREFIX=/usr/local] [DESTDIR=STAGING]: the programs into PREFIX/bin, the systemd units
# (their paths rewritten to PREFIX) into PREFIX/lib/systemd/system, the configuration examples into
# SYSCONFDIR/isn (isnd.conf serving /var/lib/isn/index) and the README into PREFIX/share/doc/isn, with the
# TLS drop-ins of systemd/ in PREFIX/share/doc/isn/systemd.
# An existing configuration file is kept (the new one goes next to it as FILE.new) unless DESTDIR is set.
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
INSTALL_PROGRAMS := isnd isn-agg isn-query isn-index isn-eval isn-bench
INSTALL_UNITS    := isnd.service isnd@.service isnd-gpu.service isn-agg.service
# TLS drop-ins (LoadCredential=), installed as examples to copy into UNIT.service.d/: each needs certificates.
INSTALL_DROPINS  := isnd-tls.conf isn-agg-tls.conf
install: programs
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/isn $(DESTDIR)$(SYSCONFDIR)/default \
	  $(DESTDIR)$(PREFIX)/share/doc/isn
	install -m 0755 $(INSTALL_PROGRAMS:%=$(BUILD)/bin/%) $(DESTDIR)$(PREFIX)/bin/
	set -e; for u in $(INSTALL_UNITS); do \
	  sed -e 's|/usr/local/bin/|$(PREFIX)/bin/|g' -e 's|/usr/local/share/doc/|$(PREFIX)/share/doc/|g' \
	      -e 's|/etc/isn/|$(SYSCONFDIR)/isn/|g' -e 's|/etc/default/|$(SYSCONFDIR)/default/|g' systemd/$$u >$(BUILD)/$$u; \
	  install -m 0644 $(BUILD)/$$u $(DESTDIR)$(UNITDIR)/$$u; done
	sed 's|^path = build/sample/index$$|path = /var/lib/isn/index|' conf/isnd.conf >$(BUILD)/isnd.conf.installed
	set -e; install_conf() { if [ -z "$(DESTDIR)" ] && [ -e "$$2" ]; then install -m 0644 "$$1" "$$2.new"; \
	  echo "kept $$2 (the new one is $$2.new)"; else install -m 0644 "$$1" "$$2"; fi; }; \
	  install_conf $(BUILD)/isnd.conf.installed $(DESTDIR)$(SYSCONFDIR)/isn/isnd.conf; \
	  install_conf conf/isn-agg.conf $(DESTDIR)$(SYSCONFDIR)/isn/isn-agg.conf; \
	  install_conf systemd/isnd.default $(DESTDIR)$(SYSCONFDIR)/default/isnd
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/isn/README.md
	install -d $(DESTDIR)$(PREFIX)/share/doc/isn/systemd
	set -e; for d in $(INSTALL_DROPINS); do \
	  sed -e 's|/usr/local/bin/|$(PREFIX)/bin/|g' -e 's|/etc/isn/|$(SYSCONFDIR)/isn/|g' systemd/$$d >$(BUILD)/$$d; \
	  install -m 0644 $(BUILD)/$$d $(DESTDIR)$(PREFIX)/share/doc/isn/systemd/$$d; done
.PHONY: install
