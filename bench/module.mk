# Benchmarks: bench/bench_*.c are programs; bench/run.sh drives them and writes JSON to $(BUILD)/bench.
BENCH_SRCS := $(wildcard bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

bench: $(PROGRAMS) $(BENCH_BINS)
	BUILD=$(BUILD) bash bench/run.sh

# make bench-stored: the size and the per-query fetch cost of stored fields (--store title) on the
# sample; JSON in $(BUILD)/bench/stored_fields.json.
bench-stored: $(PROGRAMS) $(BUILD)/bench/bench_stored $$(SAMPLE_INDEX)/index.isn
	@mkdir -p $(BUILD)/bench
	bash bench/stored_fields.sh $(BUILD) title >$(BUILD)/bench/stored_fields.json
	@cat $(BUILD)/bench/stored_fields.json
.PHONY: bench-stored

# make bench-compare BEFORE=OTHER_BUILD: this build against another one (e.g. a worktree of an older
# commit, built with make programs OTHER_BUILD/bench/bench_query), in alternating rounds, on the
# Debian index and logs that make bench prepares. JSON in $(BUILD)/bench/compare_builds.json.
bench-compare: $(PROGRAMS) $(BUILD)/bench/bench_query
	@test -n "$(BEFORE)" || { echo "usage: make bench-compare BEFORE=OTHER_BUILD_DIR (run make bench first)" >&2; exit 2; }
	bash bench/compare_builds.sh $(BEFORE) $(BUILD) $(BUILD)/bench/idx-deb $(BUILD)/data/deb/short.queries.tsv \
	  $(BUILD)/data/cran/cranfield.queries.tsv >$(BUILD)/bench/compare_builds.json
	@echo "bench-compare: $(BUILD)/bench/compare_builds.json"
.PHONY: bench-compare

# make bench-build-time BEFORE=OTHER_BUILD: single-threaded build time of the Debian index without
# positions (issue 14), this build's isn-index against another's, in interleaved rounds (ROUNDS, default
# 7). JSON in $(BUILD)/bench/build_time.json.
bench-build-time: $(BUILD)/bin/isn-index
	@test -n "$(BEFORE)" || { echo "usage: make bench-build-time BEFORE=OTHER_BUILD_DIR (run make bench first)" >&2; exit 2; }
	@mkdir -p $(BUILD)/bench
	bash bench/build_time.sh $(BUILD)/data/deb/debian.jsonl $(BEFORE)/bin/isn-index $(BUILD)/bin/isn-index \
	  >$(BUILD)/bench/build_time.json
	@cat $(BUILD)/bench/build_time.json
.PHONY: bench-build-time

# make bench-build-threads: the bounded-memory build of the Debian index (issue 39), --threads 1 and 2 at
# --memory 64MiB and 256MiB in interleaved rounds (ROUNDS, default 5): wall time, peak resident memory,
# speed-up, and the in-memory build's bytes. JSON in $(BUILD)/bench/build_threads.json.
bench-build-threads: $(BUILD)/bin/isn-index
	@mkdir -p $(BUILD)/bench
	@test -f $(BUILD)/data/deb/debian.jsonl || python3 ../shared/data/build_corpus.py debian $(BUILD)/data/deb >/dev/null
	bash bench/build_threads.sh $(BUILD)/data/deb/debian.jsonl $(BUILD)/bin/isn-index >$(BUILD)/bench/build_threads.json
	@cat $(BUILD)/bench/build_threads.json
.PHONY: bench-build-threads

# make bench-order: what --order bp and --order global cost the CPU against input order (issue 41), the
# Debian corpus built each way by this build, bench_query in rotating rounds (ROUNDS, default 5) at
# top-10 and top-1000. JSON in $(BUILD)/bench/order_cost.json.
bench-order: $(BUILD)/bin/isn-index $(BUILD)/bench/bench_query
	@mkdir -p $(BUILD)/bench
	@test -f $(BUILD)/data/deb/debian.jsonl || python3 ../shared/data/build_corpus.py debian $(BUILD)/data/deb >/dev/null
	bash bench/order_cost.sh $(BUILD) $(BUILD)/data/deb/debian.jsonl $(BUILD)/data/deb/short.queries.tsv \
	  >$(BUILD)/bench/order_cost.json
	@cat $(BUILD)/bench/order_cost.json
.PHONY: bench-order

# make bench-settle: how early a top-k could stop on the Debian corpus in --order global (issue 41), under
# the index's score bounds and under per-term block maxima of the postings left (bench_settle), at top-10
# and top-1000, on the short log and on its queries cut to their first word and to their first two
# words (early termination depends on the query's length). JSON lines in $(BUILD)/bench/settle.json.
bench-settle: $(BUILD)/bin/isn-index $(BUILD)/bench/bench_settle
	@mkdir -p $(BUILD)/bench
	@test -f $(BUILD)/data/deb/debian.jsonl || python3 ../shared/data/build_corpus.py debian $(BUILD)/data/deb >/dev/null
	$(BUILD)/bin/isn-index build --quiet --input $(BUILD)/data/deb/debian.jsonl --order global --threads 2 \
	  --out $(BUILD)/bench/idx-deb-global
	for words in 1 2; do awk -F'\t' -v w=$$words '{n = split($$2, t, " "); s = t[1]; \
	  for (i = 2; i <= w && i <= n; i++) s = s " " t[i]; print $$1 "\t" s}' $(BUILD)/data/deb/short.queries.tsv \
	  >$(BUILD)/bench/short.first$$words.tsv; done
	for log in short short.first1 short.first2; do for k in 10 1000; do \
	  q=$(BUILD)/data/deb/short.queries.tsv; [ $$log = short ] || q=$(BUILD)/bench/$$log.tsv; \
	  $(BUILD)/bench/bench_settle $(BUILD)/bench/idx-deb-global $$q --k $$k || exit 1; done; done \
	  >$(BUILD)/bench/settle.json
	@cat $(BUILD)/bench/settle.json
.PHONY: bench-settle

# make bench-peers: ISN against Lucene 10, Tantivy and PISA on the Debian corpus (bench/peers/run.sh sets up
# the peers in $(BUILD)/peers). Timing only: never part of make test.
$(BUILD)/bench/peers/isn_worker: $(BUILD)/obj/bench/peers/isn_worker.o $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

$(BUILD)/bench/peers/query_tree_check: $(BUILD)/obj/bench/peers/query_tree_check.o $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)
$(BUILD)/bench/peers/filter_speed: $(BUILD)/obj/bench/peers/filter_speed.o $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)
$(BUILD)/bench/peers/lucene_export: $(BUILD)/obj/bench/peers/lucene_export.o $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)
# make bench-query-trees: query trees and filters on the Debian corpus against a brute-force checker, and
# against Lucene 10 and Tantivy given the same tokens (bench/peers/query_trees.sh; PyPI the first time).
bench-query-trees: $(BUILD)/bin/isn-index $(BUILD)/bench/peers/isn_worker $(BUILD)/bench/peers/query_tree_check \
		$(BUILD)/bench/peers/filter_speed $(BUILD)/bench/peers/lucene_export
	BUILD=$(BUILD) bash bench/peers/query_trees.sh
.PHONY: bench-query-trees
bench-peers: $(BUILD)/bin/isn-index $(BUILD)/bench/peers/isn_worker
	BUILD=$(BUILD) bash bench/peers/run.sh
.PHONY: bench-peers

# bench/attack_never_read.sh: isnd under clients that never read (issue 16). Its raw HTTP/2 client is
# a program of tests/ (tests/attack/), built on the attack suite's raw HTTP/2 helpers in tests/support.
ATTACK_SUPPORT_OBJS := $(addprefix $(BUILD)/obj/tests/support/,raw_http2.o isnd_harness.o files.o)
$(BUILD)/bench/attack_never_read: $(BUILD)/obj/tests/attack/attack_never_read.o $(ATTACK_SUPPORT_OBJS) $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(ATTACK_SUPPORT_OBJS) $(LIBS) $(LDLIBS)

# make bench-agg-overload: a 2 x 2 tier behind isn-agg (hedging on) at 2x and 3x its sustained rate:
# isnd requests per client query, on-time complete answers, isn-agg's peak RSS (bench/agg_overload.sh;
# JSON in $(BUILD)/bench/agg_overload.json). Not part of make bench: about two minutes of load.
bench-agg-overload: $(PROGRAMS) $$(CRANFIELD)
	bash bench/agg_overload.sh $(BUILD)
.PHONY: bench-agg-overload

# make bench-overload RATE=R [ISND_ARGS="--workers 2"]: one isnd on the sample, isn-bench --sweep at
# 0.5, 1, 1.25, 1.5, 2, 3 and 4 x RATE (the node's sustained rate), three repeats: JSON per point in
# $(BUILD)/bench/overload/overload-sample.json and a plot beside it (bench/overload_curve.sh).
# make bench-big-neighbours: normal queries' p50 alone and beside four clients of 4 MiB queries (needs
# h2load); make bench-rapid-reset: the same beside two rapid-reset attackers, and the streams each
# attacker's connection got before the node's GOAWAY (both bench/neighbours.sh). None is part of make
# bench: each is minutes of load.
bench-overload: $(PROGRAMS) $$(SAMPLE_INDEX)/index.isn
	@[ -n "$(RATE)" ] || { echo "bench-overload: give RATE=the node's sustained rate (isn-bench --sustained)" >&2; exit 2; }
	bash bench/overload_curve.sh --plot sample $(RATE) $(ISND_ARGS)
bench-big-neighbours: $(PROGRAMS) $$(SAMPLE_INDEX)/index.isn
	BUILD=$(BUILD) NEIGHBOURS=big bash bench/neighbours.sh
bench-rapid-reset: $(PROGRAMS) $$(SAMPLE_INDEX)/index.isn
	BUILD=$(BUILD) NEIGHBOURS=rapid-reset CLIENTS=2 bash bench/neighbours.sh
.PHONY: bench-overload bench-big-neighbours bench-rapid-reset

# make bench-stall [RATE=R OVER_RATE=R2]: isnd on the sample stopped 20 ms every 300 ms at RATE, and at
# OVER_RATE unstopped, with scheduler.forgive_stalls off and on in turns (bench/stall_admission.sh; JSON
# in $(BUILD)/bench/stall_admission.json). Not part of make bench: about a minute of load.
bench-stall: $(PROGRAMS) $$(SAMPLE_INDEX)/index.isn
	BUILD=$(BUILD) RATE=$(or $(RATE),2000) OVER_RATE=$(or $(OVER_RATE),0) bash bench/stall_admission.sh
.PHONY: bench-stall

# make bench-tls [ISND_CPUS=0 BENCH_CPUS=1 LOOPS=1 ...]: the front end's rate with TLS against plaintext
# (trivial queries, reused connections, h2load) and TLS handshakes per second per loop
# (bench/tls_rate.sh, issue 37; JSON in $(BUILD)/bench/tls_rate.json). Not part of make bench.
bench-tls: $(PROGRAMS)
	@mkdir -p $(BUILD)/bench
	BUILD=$(BUILD) bash bench/tls_rate.sh | tee $(BUILD)/bench/tls_rate.json
.PHONY: bench-tls

# make ranker-quality: the re-ranker's training recipe (bench/l2_quality.sh): LambdaMART trained on the
# Debian train log, re-ranking the held-out Debian known-item log, and two folds of Cranfield's queries;
# MRR@10, nDCG@10 and the rest against BM25 with isn-eval --compare's paired tests. A few minutes on
# two cores; JSON in $(BUILD)/bench/l2_quality.json. Not part of make test (ranker_recipe_test.sh is its
# smoke test) nor make bench's timing runs.
ranker-quality: $(BUILD)/bin/isn-index $(BUILD)/bin/isn-query $(BUILD)/bin/isn-eval $$(CRANFIELD)
	@test -f $(BUILD)/data/deb/debpkg.jsonl || python3 ../shared/data/build_corpus.py debian $(BUILD)/data/deb >/dev/null
	BUILD=$(BUILD) bash bench/l2_quality.sh
.PHONY: ranker-quality

# make bench-l2-pass: the whole second stage per query (FE + transforms + model), the CPU (one thread,
# split per step, and every core) against the one-pass GPU (bench_l2_pass; CPU only without a GPU), on
# the Debian short log over the debpkg index that make ranker-quality builds. JSON lines in
# $(BUILD)/bench/l2_pass.json. On the GPU machine: bench/gpu_l2_pass_device.sh.
bench-l2-pass: $(BUILD)/bench/bench_l2_pass $(BUILD)/bin/isn-index
	@test -f $(BUILD)/bench/l2/debian/idx/index.isn || { echo "bench-l2-pass: run make ranker-quality first (it builds the index)" >&2; exit 2; }
	python3 bench/ranker_logs.py plain $(BUILD)/data/deb/short.queries.tsv $(BUILD)/bench/l2/short.tsv
	$(BUILD)/bench/bench_l2_pass --index $(BUILD)/bench/l2/debian/idx --queries $(BUILD)/bench/l2/short.tsv \
	  --n1 100,1000,10000 --max-queries 100 --seconds 2 >$(BUILD)/bench/l2_pass.json
	@cat $(BUILD)/bench/l2_pass.json
.PHONY: bench-l2-pass

# make loop-cost: the event loop's CPU time per request (µs), answered and refused at HEADERS, plaintext
# and TLS, on the sample index (bench/loop_cost.sh; h2load). BUILDS="OTHER_BUILD build" compares builds
# in alternating rounds. isnd on CPU 0 and h2load on CPU 1 unless ISND_CPUS / BENCH_CPUS say otherwise
# (empty: unpinned). JSON in $(BUILD)/bench/loop_cost.json.
loop-cost: $(PROGRAMS) $$(SAMPLE_INDEX)/index.isn
	@mkdir -p $(BUILD)/bench
	BUILDS="$${BUILDS:-$(BUILD)}" INDEX=$(SAMPLE_INDEX) ISND_CPUS=$${ISND_CPUS-0} BENCH_CPUS=$${BENCH_CPUS-1} \
	  bash bench/loop_cost.sh >$(BUILD)/bench/loop_cost.json
	@cat $(BUILD)/bench/loop_cost.json
.PHONY: loop-cost

# make bench-cache-coverage: how much of Debian's log a list cache trained on its first half can answer (issue 41)
# on a synthetic partition of COVERAGE_DOCS documents (default 2,000,000) fitted to the Debian index that make bench builds,
# the log transplanted (isn-index synth --transplant-queries): the held-out queries naming only trained lists, and
# the postings and device bytes of the lists they name that the training half does not (per query, and per batch of
# 256 the distinct ones: what copying them to the device would move across the bus). JSON in
# $(BUILD)/bench/cache_coverage.json.
COVERAGE_DOCS ?= 2000000
bench-cache-coverage: $(BUILD)/bin/isn-index $(BUILD)/bench/bench_cache_coverage
	@test -f $(BUILD)/bench/idx-deb/index.isn -a -f $(BUILD)/data/deb/debpkg.queries.tsv || \
	  { echo "bench-cache-coverage: run make bench first (it builds $(BUILD)/bench/idx-deb and the Debian logs)" >&2; exit 2; }
	@mkdir -p $(BUILD)/bench
	$(BUILD)/bin/isn-index synth --docs $(COVERAGE_DOCS) --seed 1 --fit $(BUILD)/bench/idx-deb \
	  --fit-queries $(BUILD)/data/deb/debpkg.queries.tsv --order global --transplant-queries \
	  --out $(BUILD)/bench/synth-transplant >/dev/null
	half=$$(($$(wc -l <$(BUILD)/bench/synth-transplant/queries.tsv) / 2)); \
	  head -n $$half $(BUILD)/bench/synth-transplant/queries.tsv >$(BUILD)/bench/synth-transplant/train.tsv; \
	  tail -n +$$((half + 1)) $(BUILD)/bench/synth-transplant/queries.tsv >$(BUILD)/bench/synth-transplant/measured.tsv
	$(BUILD)/bench/bench_cache_coverage --index $(BUILD)/bench/synth-transplant \
	  --train $(BUILD)/bench/synth-transplant/train.tsv --measured $(BUILD)/bench/synth-transplant/measured.tsv \
	  >$(BUILD)/bench/cache_coverage.json
	@cat $(BUILD)/bench/cache_coverage.json
.PHONY: bench-cache-coverage
