/* The index reader on mutated files, and everything that reads an index that opened: cursors (next,
 * next_geq, frequencies, shallow skips), positions, the deep verify, the threshold probe and every
 * first-stage algorithm. Before opening, the harness recomputes every section checksum, the header
 * checksum and the file size, so mutations get past the checksums to the structure behind them.
 * The seeds are small indexes with long lists (tests/fuzz/corpus/index; FUZZ_WRITE_SEED=PATH writes
 * the one with stored fields, seed-stored.isn, again, and with FUZZ_SEED_GLOBAL=1 in global order with
 * score bounds, seed-global.isn), so stored-field fetches and score bounds are fuzzed too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/format.h" /* the layout, to reseal mutated files */
#include "index/index.h"
#include "ranking/ranking.h"

static char dir[64], path[128];

static void write_bytes(const char *to, const uint8_t *data, size_t size) {
    FILE *f = fopen(to, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
}

/* A small index whose frequent words have several 128-posting blocks. */
static void build_seed(const char *out_dir) {
    static const char *const WORDS[] = {"wind", "tunnel", "river", "stone", "light", "paper", "glass",
                                        "cloud", "field", "bridge", "north", "quiet"};
    isn_build_options options;
    isn_build_options_default(&options);
    options.num_fields = 2;
    strcpy(options.fields[0], "title");
    strcpy(options.fields[1], "body");
    options.positions = true;
    options.progress = false;
    options.num_stored = 2; /* section 'stored' in reach of the mutations */
    if (getenv("FUZZ_SEED_GLOBAL")) options.order = ISN_ORDER_GLOBAL; /* and section 'score_bounds' */
    strcpy(options.stored[0], "title");
    strcpy(options.stored[1], "body");
    isn_builder *builder = isn_builder_new(&options);
    uint64_t rng = 7;
    char id[32], title[128], body[1024], err[256];
    for (int d = 0; d < 600; d++) {
        size_t tn = 0, bn = 0;
        for (int i = 0; i < 3; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tn += (size_t)snprintf(title + tn, sizeof title - tn, "%s ", WORDS[(rng >> 33) % 12]);
        }
        for (int i = 0; i < 12; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            bn += (size_t)snprintf(body + bn, sizeof body - bn, "%s ", WORDS[(rng >> 33) % (3 + i % 10)]);
        }
        snprintf(id, sizeof id, "d%d", d);
        const char *fields[2] = {title, body};
        size_t lens[2] = {tn, bn};
        if (isn_builder_add(builder, id, fields, lens, 0.0f, err, sizeof err) != 0) abort();
    }
    if (isn_builder_write(builder, out_dir, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "seed index: %s\n", err);
        abort();
    }
    isn_builder_free(builder);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/tmp/isn-fuzz-index-XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(path, sizeof path, "%s/%s", dir, ISN_INDEX_FILE);
    const char *seed = getenv("FUZZ_WRITE_SEED");
    if (seed) {
        build_seed(dir);
        char command[512];
        snprintf(command, sizeof command, "cp '%s' '%s'", path, seed);
        if (system(command) != 0) abort();
    }
    return 0;
}

/* Checksums and size made right, as far as the table lies inside the file. */
static void reseal(uint8_t *data, size_t size) {
    if (size < sizeof(isn_file_header)) return;
    isn_file_header *header = (isn_file_header *)data;
    uint32_t sections = header->num_sections <= SEC_COUNT ? header->num_sections : SEC_COUNT;
    size_t head = sizeof(isn_file_header) + sections * sizeof(isn_section_entry);
    if (size < head) return;
    isn_section_entry *table = (isn_section_entry *)(data + sizeof *header);
    for (uint32_t s = 0; s < sections; s++)
        if (table[s].offset <= size && table[s].bytes <= size - table[s].offset)
            table[s].checksum = isn_hash64(data + table[s].offset, table[s].bytes);
    header->file_bytes = size;
    header->header_checksum = isn_index_header_checksum(header, table);
}

static void walk_cursors(const isn_index *ix, const uint8_t *steer, size_t steer_len) {
    const isn_index_info *info = isn_index_get_info(ix);
    uint32_t positions[64];
    for (uint32_t t = 0; t < info->num_terms && t < 256; t++) {
        isn_term_stats stats;
        isn_index_term_stats(ix, t, &stats);
        isn_cursor c;
        isn_cursor_open(&c, ix, t);
        uint32_t sum = 0;
        for (uint32_t doc = c.doc, i = 0; doc != ISN_DOC_END && i <= stats.df; doc = isn_cursor_next(&c), i++) {
            sum += isn_cursor_freq(&c);
            if (i < 4) isn_index_positions(ix, t, doc, i % info->num_fields, positions, 64);
        }
        isn_cursor_open(&c, ix, t);
        uint32_t target = 0;
        for (size_t i = 0; i < steer_len && c.doc != ISN_DOC_END; i++) {
            target += steer[i] + 1u;
            isn_cursor_shallow_next_geq(&c, target);
            (void)isn_cursor_shallow_max(&c);
            if (isn_cursor_next_geq(&c, target) != ISN_DOC_END) sum += isn_cursor_freq(&c);
        }
        (void)sum;
    }
}

static void search_everything(const isn_index *ix) {
    const isn_index_info *info = isn_index_get_info(ix);
    isn_searcher *searcher = isn_searcher_new(ix);
    if (!searcher) return;
    char text[600], term[300], err[256];
    size_t n = 0;
    for (uint32_t t = 0; t < info->num_terms && t < 6; t++) {
        isn_index_term_text(ix, t, term, sizeof term);
        n += (size_t)snprintf(text + n, sizeof text - n, "%s ", term);
        if (n >= sizeof text - 1) break;
    }
    isn_query query;
    if (isn_query_parse(searcher, text, strlen(text), &query, err, sizeof err) == 0) {
        static const double LEVELS[] = {0.5, 1.0, 2.0};
        double passed[3];
        uint32_t scored;
        isn_threshold_probe(ix, &query, 10, LEVELS, 3, passed, &scored);
        isn_hit hits[10];
        for (int a = ISN_ALGO_AUTO; a < ISN_ALGO_COUNT; a++) {
            isn_search_options options;
            isn_search_options_default(&options);
            options.algo = (isn_algo)a;
            options.mode = a == ISN_ALGO_AND || a == ISN_ALGO_BMAND ? ISN_MODE_AND : ISN_MODE_OR;
            options.k = 10;
            uint32_t num_hits;
            isn_search_stats stats;
            isn_search(searcher, &query, &options, hits, &num_hits, &stats, err, sizeof err);
        }
    }
    isn_searcher_free(searcher);
}

/* Stored fields of documents spread over the index (every block's first, last and some between). */
static void fetch_stored(const isn_index *ix) {
    size_t bytes = isn_index_stored_scratch_bytes(ix);
    uint8_t *scratch = bytes ? malloc(bytes) : NULL;
    if (!scratch) return;
    const isn_index_info *info = isn_index_get_info(ix);
    isn_stored_text texts[ISN_MAX_FIELDS];
    char err[ISN_ERR_LEN];
    uint32_t sum = 0;
    for (uint32_t doc = 0; doc < info->num_docs; doc += 1 + doc / 4)
        if (isn_index_stored_get(ix, doc, scratch, texts, err, sizeof err) == 0)
            for (uint32_t f = 0; f < info->num_stored_fields; f++)
                for (uint32_t i = 0; i < texts[f].len; i++) sum += (uint8_t)texts[f].text[i];
    (void)sum;
    free(scratch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    reseal(copy, size);
    write_bytes(path, copy, size);
    free(copy);
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) return 0;
    walk_cursors(ix, data + size / 2, size - size / 2 < 64 ? size - size / 2 : 64);
    double bound;
    for (uint32_t doc = 0; doc <= isn_index_get_info(ix)->num_docs; doc += 1 + doc)
        isn_index_score_bound(ix, doc, 3.5, doc % 2 ? 0.0f : 1e3f, &bound);
    isn_index_verify(ix, err, sizeof err);
    fetch_stored(ix);
    search_everything(ix);
    isn_index_close(ix);
    return 0;
}
