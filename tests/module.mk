# tests/unit/test_*.c (one part each) and tests/integration/test_*.c (real daemons on loopback) are
# one cmocka program each, built flat into $(BUILD)/tests/; tests/support/*.c (index builders, the
# brute-force oracle, the isnd harness) are linked into every one.
TEST_SRCS    := $(wildcard tests/unit/test_*.c tests/integration/test_*.c)
TEST_SUPPORT := $(wildcard tests/support/*.c)
TEST_SUPPORT_OBJS := $(TEST_SUPPORT:%.c=$(BUILD)/obj/%.o)
TEST_BINS    := $(addprefix $(BUILD)/tests/,$(notdir $(TEST_SRCS:.c=)))
TESTS        += $(TEST_BINS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_SUPPORT_OBJS) $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_OBJS) $(LIBS) $(LDLIBS) -lcmocka

$(BUILD)/tests/%: $(BUILD)/obj/tests/integration/%.o $(TEST_SUPPORT_OBJS) $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_OBJS) $(LIBS) $(LDLIBS) -lcmocka
# make install into scratch prefixes; systemd-analyze verify on the installed units.
TESTS += tests/unit/install_test.sh
# The README's command blocks, run as written (tests/unit/readme_test.sh).
TESTS += tests/unit/readme_test.sh
# The re-ranker's training recipe at toy size (bench/l2_quality.sh; python3-xgboost).
TESTS += tests/unit/ranker_recipe_test.sh
# isn-query's TREC runs: ids holding whitespace or '%' percent-encoded, six fields a line.
TESTS += tests/unit/isn_query_run_test.sh
# deploy/kubernetes/generate.py's manifests pass kubernetes-validate (PyPI, into $(BUILD)/venv-k8s).
TESTS += tests/unit/k8s_manifests_test.sh
# CIFF against PyPI's ciff-toolkit (into $(BUILD)/venv-ciff; skips, saying so, without PyPI).
TESTS += tests/unit/ciff_toolkit_test.sh
# deploy/prometheus alert rules (promtool check rules, test rules) and the Grafana dashboard's queries.
TESTS += tests/unit/monitoring_test.sh
# bench/overload_verdicts.py judges issue 35's must-shows as the issue words them (written inputs, no load).
TESTS += tests/unit/overload_verdicts_test.sh
# bench/node_sheds.py reads the node's refusals and loop iterations from two /metrics scrapes (written inputs).
TESTS += tests/unit/node_sheds_test.sh
# bench/cgroup_throttle.py reads how long a process's cgroup CPU quotas stopped it (written /proc and cgroup trees).
TESTS += tests/unit/cgroup_throttle_test.sh
# bench/cpu_split.py: which CPUs share a physical core, and a split of whole cores (written topology trees).
TESTS += tests/unit/cpu_split_test.sh
# bench/shed_episodes.py cuts an overload_profile.py timeline into refusal episodes (a written profile).
TESTS += tests/unit/shed_episodes_test.sh
# tools/isn-cluster.sh: cluster.json with every isnd's stats endpoint, isn-agg's start line, Hit.partition.
TESTS += tests/unit/cluster_script_test.sh
# TLS end to end: grpcurl, Python grpcio and Prometheus over TLS, mutual-TLS refusals by reason, a
# 2 x 2 tier with mutual TLS on every hop, 20 certificate rotations under isn-bench load.
TESTS += tests/integration/tls_test.sh
