/* DNS discovery's replica sets (agg/discovery.c, agg_discovery_apply): what a DNS answer does to a
 * partition's replicas, without a network: addresses join, a replica no longer named drains while
 * calls are in flight on it and its slot is freed once they are answered, one named again before
 * that is back in rotation, slots are reused, and a reload keeps what DNS named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agg/agg_internal.h"

static agg *make(void) {
    agg_config config;
    agg_config_default(&config);
    char err[256];
    assert_int_equal(agg_config_set(&config, "partition", "dns:part0.isn.test:7070", err, sizeof err), 0);
    assert_int_equal(agg_config_set(&config, "partition", "127.0.0.1:7100", err, sizeof err), 0);
    assert_int_equal(agg_config_validate(&config, err, sizeof err), 0);
    assert_string_equal(config.partitions[0].dns_name, "part0.isn.test");
    assert_int_equal(config.partitions[0].dns_port, 7070);
    assert_int_equal(config.partitions[0].num_replicas, 0);
    agg *a = agg_new(NULL, &config, err, sizeof err);
    assert_non_null(a);
    return a;
}

static void apply(agg *a, const char *list) {
    static char addresses[AGG_MAX_REPLICAS * 2][AGG_ADDR_MAX];
    uint32_t n = 0;
    char copy[1024], *save = NULL;
    snprintf(copy, sizeof copy, "%s", list);
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) snprintf(addresses[n++], AGG_ADDR_MAX, "%s", t);
    agg_discovery_apply(a, 0, addresses, n);
}

static int slot_of(const agg *a, const char *address) {
    for (uint32_t i = 0; i < a->partitions[0].num_replicas; i++)
        if (!strcmp(a->partitions[0].replicas[i].address, address)) return (int)i;
    return -1;
}

static void test_addresses_join_and_drain(void **state) {
    (void)state;
    agg *a = make();
    char why[256];
    assert_false(agg_ready(a, why, sizeof why)); /* nothing resolved yet */
    apply(a, "10.0.0.1:7070,10.0.0.2:7070");
    assert_int_equal(a->partitions[0].num_replicas, 2);
    assert_true(agg_ready(a, why, sizeof why));
    assert_int_equal(a->partitions[0].replicas_added, 2);

    /* .1 gone while two calls are in flight on it: draining, never chosen, its slot kept */
    a->partitions[0].replicas[slot_of(a, "10.0.0.1:7070")].inflight = 2;
    apply(a, "10.0.0.2:7070");
    int s1 = slot_of(a, "10.0.0.1:7070");
    assert_true(s1 >= 0);
    assert_true(a->partitions[0].replicas[s1].draining);
    assert_int_equal(a->num_draining, 1);
    for (int i = 0; i < 10; i++) assert_int_equal(agg_choose_replica(&a->partitions[0], 0), slot_of(a, "10.0.0.2:7070"));
    agg_discovery_reap(a);
    assert_true(slot_of(a, "10.0.0.1:7070") >= 0); /* still answering */

    /* named again before its calls finished: back in rotation, in the same slot */
    apply(a, "10.0.0.1:7070,10.0.0.2:7070");
    assert_int_equal(slot_of(a, "10.0.0.1:7070"), s1);
    assert_false(a->partitions[0].replicas[s1].draining);
    assert_int_equal(a->num_draining, 0);

    /* gone again; its calls are answered: the slot is freed, and a new address takes it */
    apply(a, "10.0.0.2:7070");
    a->partitions[0].replicas[s1].inflight = 0;
    agg_discovery_reap(a);
    assert_int_equal(slot_of(a, "10.0.0.1:7070"), -1);
    assert_int_equal(a->num_draining, 0);
    apply(a, "10.0.0.2:7070,10.0.0.3:7070");
    assert_true(slot_of(a, "10.0.0.3:7070") >= 0);
    assert_true(slot_of(a, "10.0.0.3:7070") < 2);
    assert_int_equal(a->partitions[0].replicas_removed, 2);

    /* a name with no address left: the partition has no replica, and readiness says so */
    apply(a, "");
    assert_int_equal(a->partitions[0].num_replicas, 0);
    assert_false(agg_ready(a, why, sizeof why));
    assert_non_null(strstr(why, "partition 0"));

    /* more addresses than slots: the first AGG_MAX_REPLICAS */
    char many[2048] = "";
    for (int i = 0; i < AGG_MAX_REPLICAS + 3; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s10.0.1.%d:7070", i ? "," : "", i);
    apply(a, many);
    assert_int_equal(a->partitions[0].num_replicas, AGG_MAX_REPLICAS);
    agg_free(a);
}

/* A reload with the same dns: name keeps the replicas DNS named (and their state); the metrics show them. */
static void test_reload_keeps_what_dns_named(void **state) {
    (void)state;
    agg *a = make();
    apply(a, "10.0.0.1:7070,10.0.0.2:7070");
    a->partitions[0].replicas[0].requests = 42;
    agg_config next = a->config;
    char err[256];
    assert_int_equal(agg_reload(a, &next, err, sizeof err), 0);
    assert_int_equal(a->partitions[0].num_replicas, 2);
    assert_int_equal(a->partitions[0].replicas[0].requests, 42);
    byte_buffer out = {0};
    agg_render_metrics(a, &out);
    buffer_append(&out, "", 1);
    const char *text = (const char *)out.data;
    assert_non_null(strstr(text, "isn_agg_partition_replicas{partition=\"0\"} 2"));
    assert_non_null(strstr(text, "isn_agg_replica_up{partition=\"0\",replica=\"10.0.0.2:7070\"} 1"));
    assert_non_null(strstr(text, "isn_agg_dns_replica_changes_total{partition=\"0\",change=\"added\"} 2"));
    assert_non_null(strstr(text, "isn_agg_dns_addresses{partition=\"0\",name=\"part0.isn.test\"} 2"));
    buffer_free(&out);

    /* another name: its replicas come from the next lookup */
    snprintf(next.partitions[0].dns_name, sizeof next.partitions[0].dns_name, "other.isn.test");
    assert_int_equal(agg_reload(a, &next, err, sizeof err), 0);
    assert_int_equal(a->partitions[0].num_replicas, 0);
    agg_free(a);
}

/* Of many addresses, the replicas are the same whatever their order; one address gone changes one. */
static void test_choice_among_many_is_stable(void **state) {
    (void)state;
    static char addresses[300][AGG_ADDR_MAX], chosen[AGG_MAX_REPLICAS][AGG_ADDR_MAX];
    uint64_t rng = 7;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 300; i++) snprintf(addresses[i], AGG_ADDR_MAX, "10.0.%d.%d:7070", i / 250, i % 250);
        for (int i = 299; i > 0; i--) { /* another order each round */
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int j = (int)((rng >> 33) % (uint64_t)(i + 1));
            char swap[AGG_ADDR_MAX];
            memcpy(swap, addresses[i], AGG_ADDR_MAX), memcpy(addresses[i], addresses[j], AGG_ADDR_MAX);
            memcpy(addresses[j], swap, AGG_ADDR_MAX);
        }
        assert_int_equal(agg_discovery_choose(42, addresses, 300, AGG_MAX_REPLICAS), AGG_MAX_REPLICAS);
        for (int i = 0; i < AGG_MAX_REPLICAS; i++) {
            if (!round) memcpy(chosen[i], addresses[i], AGG_ADDR_MAX);
            bool found = false;
            for (int j = 0; j < AGG_MAX_REPLICAS && !found; j++) found = !strcmp(chosen[j], addresses[i]);
            assert_true(found);
        }
    }
    /* one chosen address gone: the other seven stay */
    for (int i = 0; i < 300; i++) snprintf(addresses[i], AGG_ADDR_MAX, "10.0.%d.%d:7070", i / 250, i % 250);
    int gone = -1;
    for (int i = 0; i < 300 && gone < 0; i++)
        if (!strcmp(addresses[i], chosen[0])) gone = i;
    memcpy(addresses[gone], addresses[299], AGG_ADDR_MAX);
    agg_discovery_choose(42, addresses, 299, AGG_MAX_REPLICAS);
    int kept = 0;
    for (int i = 0; i < AGG_MAX_REPLICAS; i++)
        for (int j = 1; j < AGG_MAX_REPLICAS; j++) kept += !strcmp(addresses[i], chosen[j]);
    assert_int_equal(kept, AGG_MAX_REPLICAS - 1);
    /* a different seed (another aggregator) chooses differently */
    agg_discovery_choose(43, addresses, 299, AGG_MAX_REPLICAS);
    int same = 0;
    for (int i = 0; i < AGG_MAX_REPLICAS; i++)
        for (int j = 0; j < AGG_MAX_REPLICAS; j++) same += !strcmp(addresses[i], chosen[j]);
    assert_true(same < AGG_MAX_REPLICAS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice_among_many_is_stable),
        cmocka_unit_test(test_addresses_join_and_drain),
        cmocka_unit_test(test_reload_keeps_what_dns_named),
    };
    return cmocka_run_group_tests_name("agg_discovery", tests, NULL, NULL);
}
