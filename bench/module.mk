# Benchmarks: bench/bench_*.c are programs; bench/run.sh drives them and writes JSON to $(BUILD)/bench.
BENCH_SRCS := $(wildcard bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

bench: $(PROGRAMS) $(BENCH_BINS)
	BUILD=$(BUILD) bash bench/run.sh
