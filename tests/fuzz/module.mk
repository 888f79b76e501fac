# tests/fuzz/: libFuzzer targets (tests/fuzz/fuzz_NAME.c), their seed corpora (corpus/NAME/) and
# the inputs that once crashed them (regressions/NAME/).
#   make test        replays every seed and regression input through each target, built with the
#                    normal compiler (build/tests/fuzz_replay_NAME): no libFuzzer needed
#   make fuzz        builds the targets with clang, libFuzzer, ASan and UBSan into build-fuzz/ and
#                    runs each for FUZZ_SECONDS (default 60) from its corpus (tests/fuzz/run.sh)
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAYS := $(addprefix $(BUILD)/tests/fuzz_replay_,$(FUZZ_TARGETS))
TESTS += $(FUZZ_REPLAYS)

# tests/fuzz/loopback_client.c: the fresh loopback connections of the targets that feed a server a socket
FUZZ_SUPPORT := tests/fuzz/loopback_client.c

$(BUILD)/tests/fuzz_replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c $(FUZZ_SUPPORT) $$(LIBS) | $(PROTO_GEN_H) $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DFUZZ_NAME='"$*"' -o $@ tests/fuzz/fuzz_$*.c tests/fuzz/replay_main.c $(FUZZ_SUPPORT) $(LIBS) $(LDLIBS)

# The libFuzzer binaries (only in a clang build: make fuzz calls this with BUILD=build-fuzz CC=clang).
$(BUILD)/fuzz/%: tests/fuzz/fuzz_%.c $(FUZZ_SUPPORT) $$(LIBS) | $(PROTO_GEN_H) $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_SUPPORT) $(LIBS) $(LDLIBS)
fuzz-binaries: $(addprefix $(BUILD)/fuzz/,$(FUZZ_TARGETS))

FUZZ_SECONDS ?= 60
FUZZ_RUNS    ?=
FUZZ_BUILD   ?= build-fuzz
fuzz-build:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=clang CUDA=0 OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -fsanitize=fuzzer-no-link" \
	  fuzz-binaries
fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RUNS=$(FUZZ_RUNS) bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_TARGETS)
.PHONY: fuzz fuzz-build fuzz-binaries
