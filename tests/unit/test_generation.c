/* isnd's index generations (daemon/generation.c): the reference count that keeps a replaced
 * generation until its last request ends, the slot that publishes the next one, the identity (content
 * hash, build time; an index older than the build time in meta is read with its file's mtime), and
 * refusals that name the section at fault. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <cmocka.h>

#include "daemon/generation.h"
#include "tests/support/files.h"
#include "tests/support/index_builder.h"

static size_t doc_text(void *user, uint32_t doc, char *text, size_t cap) {
    (void)user;
    return (size_t)snprintf(text, cap, "alpha beta%u gamma%u common", doc % 7, doc % 13);
}

typedef struct {
    char ids[8][24];
    int count;
} freed_log;

static void on_freed(void *user, const char *id, uint64_t built, double seconds) {
    (void)built, (void)seconds;
    freed_log *log = user;
    snprintf(log->ids[log->count++], sizeof log->ids[0], "%s", id);
}

static index_generation *open_generation(const char *dir, freed_log *log) {
    char err[512];
    index_generation *g = generation_open(dir, true, err, sizeof err);
    if (!g) fail_msg("generation_open %s: %s", dir, err);
    search_service_params params = {.workers = 2, .max_k = 10, .route = NULL, .warm_up = true};
    if (generation_add_workers(g, &params, err, sizeof err) < 0) fail_msg("generation_add_workers: %s", err);
    generation_on_freed(g, on_freed, NULL, log);
    return g;
}

static void test_old_generation_freed_by_its_last_request(void **state) {
    (void)state;
    support_index a, b;
    assert_int_equal(support_index_build(&a, "gen-a", NULL, 300, doc_text, NULL), 0);
    assert_int_equal(support_index_build(&b, "gen-b", NULL, 500, doc_text, NULL), 0);
    freed_log log = {0};
    generation_slot slot;
    generation_slot_init(&slot);
    assert_null(generation_slot_acquire(&slot));

    index_generation *first = open_generation(a.dir, &log);
    char first_id[24];
    snprintf(first_id, sizeof first_id, "%s", first->id);
    assert_null(generation_slot_publish(&slot, first));
    index_generation *request1 = generation_slot_acquire(&slot); /* admitted on the first */
    index_generation *request2 = generation_slot_acquire(&slot);
    assert_ptr_equal(request1, first);

    index_generation *second = open_generation(b.dir, &log);
    assert_string_not_equal(first_id, second->id);
    index_generation *old = generation_slot_publish(&slot, second);
    assert_ptr_equal(old, first);
    generation_release(old); /* the slot's reference: requests still hold it */
    assert_int_equal(log.count, 0);

    index_generation *request3 = generation_slot_acquire(&slot); /* admitted after the swap */
    assert_ptr_equal(request3, second);
    assert_int_equal(request3->info->num_docs, 500);
    /* the old generation still answers its requests, with its own searchers */
    assert_int_equal(request1->info->num_docs, 300);
    assert_non_null(request1->workers[1]);
    assert_non_null(request1->planners[2]);

    generation_release(request3);
    generation_release(request2);
    assert_int_equal(log.count, 0);
    generation_release(request1); /* its last request: freed now, the new one untouched */
    assert_int_equal(log.count, 1);
    assert_string_equal(log.ids[0], first_id);

    generation_slot_destroy(&slot);
    assert_int_equal(log.count, 2);
    support_index_close(&a);
    support_index_close(&b);
}

static void test_identity(void **state) {
    (void)state;
    setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
    support_index a;
    assert_int_equal(support_index_build(&a, "gen-id", NULL, 200, doc_text, NULL), 0);
    unsetenv("SOURCE_DATE_EPOCH");
    char err[512];
    index_generation *g = generation_open(a.dir, true, err, sizeof err);
    assert_non_null(g);
    char expected[24];
    snprintf(expected, sizeof expected, "%016llx", (unsigned long long)isn_index_get_info(a.index)->content_hash);
    assert_string_equal(g->id, expected);
    assert_int_equal(g->info->built_unix_seconds, 1700000000);
    assert_false(g->info->built_from_mtime);
    generation_release(g);
    support_index_close(&a);
}

/* Rewrites an index as the format was before the build time: meta 8 bytes shorter, checksums redone. */
static void strip_build_time(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, ISN_INDEX_FILE);
    size_t len;
    uint8_t *data = support_read_file(path, &len);
    assert_non_null(data);
    /* header: magic 8, version 4, sections 4, file bytes 8, checksum 8; entries: name 16, offset, bytes, checksum */
    uint64_t offset, bytes;
    memcpy(&offset, data + 32 + 16, 8);
    memcpy(&bytes, data + 32 + 24, 8);
    bytes -= 8;
    memcpy(data + 32 + 24, &bytes, 8);
    uint64_t checksum = isn_hash64(data + offset, bytes);
    memcpy(data + 32 + 32, &checksum, 8);
    uint32_t sections;
    memcpy(&sections, data + 12, 4);
    memset(data + 24, 0, 8);
    checksum = isn_hash64(data, 32 + (size_t)sections * 40);
    memcpy(data + 24, &checksum, 8);
    assert_int_equal(support_write_file(path, data, len), 0);
    free(data);
    struct timeval times[2] = {{1600000000, 0}, {1600000000, 0}};
    assert_int_equal(utimes(path, times), 0);
}

static void test_older_index_uses_mtime(void **state) {
    (void)state;
    support_index a;
    assert_int_equal(support_index_build(&a, "gen-old", NULL, 100, doc_text, NULL), 0);
    strip_build_time(a.dir);
    char err[512];
    index_generation *g = generation_open(a.dir, true, err, sizeof err);
    if (!g) fail_msg("an index without a build time is refused: %s", err);
    assert_true(g->info->built_from_mtime);
    assert_int_equal(g->info->built_unix_seconds, 1600000000);
    generation_release(g);
    support_index_close(&a);
}

static void test_refusal_names_section(void **state) {
    (void)state;
    support_index a;
    assert_int_equal(support_index_build(&a, "gen-bad", NULL, 100, doc_text, NULL), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", a.dir, ISN_INDEX_FILE);
    size_t len;
    uint8_t *data = support_read_file(path, &len);
    assert_non_null(data);
    uint64_t offset, bytes; /* the lexicon's front-coded terms: section 6 */
    memcpy(&offset, data + 32 + 5 * 40 + 16, 8);
    memcpy(&bytes, data + 32 + 5 * 40 + 24, 8);
    data[offset + bytes / 2] ^= 0x21;
    assert_int_equal(support_write_file(path, data, len), 0);
    free(data);
    char err[512];
    assert_null(generation_open(a.dir, true, err, sizeof err));
    if (!strstr(err, "section 'lex_data'")) fail_msg("refusal without the section: %s", err);
    assert_null(generation_open("/nonexistent/isn-index", true, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/isn-index"));
    support_index_close(&a);
}

/* Generations without an index, for the lease: the reaper takes the last reference. */
typedef struct {
    index_generation *reaped[8];
    int count;
} reap_log;

static void reap_to_log(void *user, index_generation *generation) {
    reap_log *log = user;
    log->reaped[log->count++] = generation;
}

static index_generation *bare_generation(reap_log *log) {
    index_generation *g = calloc(1, sizeof *g);
    assert_non_null(g);
    atomic_init(&g->refs, 1);
    generation_on_freed(g, NULL, reap_to_log, log);
    return g;
}

/* A loop's lease lends the current generation to its requests and gives a replaced one back when its
 * last request returns it (or, for a loop whose requests all ended before the swap, when told of it). */
static void test_lease_lends_and_gives_back_replaced_generations(void **state) {
    (void)state;
    reap_log log = {0};
    generation_slot slot;
    generation_slot_init(&slot);
    generation_lease lease = {0}, idle = {0};
    bool lent;
    assert_null(generation_lease_borrow(&lease, &slot, &lent));

    index_generation *first = bare_generation(&log), *second = bare_generation(&log);
    assert_null(generation_slot_publish(&slot, first));
    assert_ptr_equal(generation_lease_borrow(&lease, &slot, &lent), first);
    assert_true(lent);
    bool lent2;
    assert_ptr_equal(generation_lease_borrow(&lease, &slot, &lent2), first);
    assert_int_equal(atomic_load(&first->refs), 2); /* the slot's and the lease's, whatever the requests */
    assert_ptr_equal(generation_lease_borrow(&idle, &slot, &lent), first);
    generation_lease_return(&idle, &slot, first, lent);
    assert_int_equal(atomic_load(&first->refs), 3);

    generation_release(generation_slot_publish(&slot, second)); /* a swap */
    assert_int_equal(log.count, 0);
    assert_ptr_equal(generation_lease_borrow(&lease, &slot, &lent), second); /* new requests: the new one */
    generation_lease_return(&lease, &slot, second, lent);
    generation_lease_return(&lease, &slot, first, true);
    assert_int_equal(log.count, 0); /* one request still on the first */
    generation_lease_return(&lease, &slot, first, lent2);
    assert_int_equal(atomic_load(&first->refs), 1); /* the idle loop's */
    generation_lease_tidy(&idle, &slot);
    assert_int_equal(log.count, 1);
    assert_ptr_equal(log.reaped[0], first);
    free(first);

    generation_lease_tidy(&lease, NULL); /* the loop ends */
    assert_int_equal(atomic_load(&second->refs), 1);
    generation_slot_destroy(&slot);
    assert_int_equal(log.count, 2);
    free(second);
}

/* Requests on more replaced generations than the lease keeps get references of their own. */
static void test_lease_full_of_replaced_generations_gives_own_references(void **state) {
    (void)state;
    reap_log log = {0};
    generation_slot slot;
    generation_slot_init(&slot);
    generation_lease lease = {0};
    index_generation *made[GENERATION_LEASE_RETIRED + 2];
    bool lent[GENERATION_LEASE_RETIRED + 2];
    for (int i = 0; i < GENERATION_LEASE_RETIRED + 2; i++) {
        made[i] = bare_generation(&log);
        generation_release(generation_slot_publish(&slot, made[i]));
        assert_ptr_equal(generation_lease_borrow(&lease, &slot, &lent[i]), made[i]); /* held by its request */
    }
    for (int i = 0; i <= GENERATION_LEASE_RETIRED; i++) assert_true(lent[i]);
    assert_false(lent[GENERATION_LEASE_RETIRED + 1]); /* four retired and the current: no room */
    assert_int_equal(atomic_load(&made[GENERATION_LEASE_RETIRED + 1]->refs), 2);
    for (int i = 0; i < GENERATION_LEASE_RETIRED + 2; i++) generation_lease_return(&lease, &slot, made[i], lent[i]);
    assert_int_equal(log.count, GENERATION_LEASE_RETIRED + 1); /* every replaced one; the slot keeps the last */
    generation_lease_tidy(&lease, NULL);
    generation_slot_destroy(&slot);
    assert_int_equal(log.count, GENERATION_LEASE_RETIRED + 2);
    for (int i = 0; i < GENERATION_LEASE_RETIRED + 2; i++) free(made[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_old_generation_freed_by_its_last_request),
        cmocka_unit_test(test_lease_lends_and_gives_back_replaced_generations),
        cmocka_unit_test(test_lease_full_of_replaced_generations_gives_own_references),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_older_index_uses_mtime),
        cmocka_unit_test(test_refusal_names_section),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
