/* The CIFF import (index/ciff_import.c) on mutated files. A file it refuses must be refused with a
 * message naming the file; a file it accepts must give an index that opens, passes the deep verify and
 * answers queries, and whose export (index/ciff_export.c) imports again. The seeds
 * (tests/fuzz/corpus/ciff) are exports of small indexes, one with lists of several blocks
 * (FUZZ_WRITE_SEED=PATH writes that one again). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/index.h"
#include "ranking/ranking.h"

static char dir[64], input[128], out_dir[128], exported[128], again_dir[128];

static void write_bytes(const char *to, const uint8_t *data, size_t size) {
    FILE *f = fopen(to, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

/* A small index whose frequent words have several 128-posting blocks, exported as CIFF to `path`. */
static void write_seed(const char *path) {
    static const char *const WORDS[] = {"wind", "tunnel", "river", "stone", "Light", "paper", "glass", "naïve"};
    isn_build_options options;
    isn_build_options_default(&options);
    options.num_fields = 1;
    strcpy(options.fields[0], "body");
    options.positions = false;
    options.progress = false;
    isn_builder *builder = isn_builder_new(&options);
    uint64_t rng = 11;
    char id[32], body[512], err[ISN_ERR_LEN];
    for (int d = 0; d < 300; d++) {
        size_t n = 0;
        for (int i = 0; i < 6; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            n += (size_t)snprintf(body + n, sizeof body - n, "%s ", WORDS[(rng >> 33) % (2 + i)]);
        }
        snprintf(id, sizeof id, "doc-%d", d);
        const char *fields[1] = {body};
        size_t lens[1] = {n};
        if (isn_builder_add(builder, id, fields, lens, 0.0f, err, sizeof err) != 0) abort();
    }
    if (isn_builder_write(builder, out_dir, NULL, err, sizeof err) != 0 || isn_ciff_export(out_dir, path, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "seed: %s\n", err);
        abort();
    }
    isn_builder_free(builder);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/tmp/isn-fuzz-ciff-XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(input, sizeof input, "%s/input.ciff", dir);
    snprintf(out_dir, sizeof out_dir, "%s/index", dir);
    snprintf(exported, sizeof exported, "%s/exported.ciff", dir);
    snprintf(again_dir, sizeof again_dir, "%s/again", dir);
    const char *seed = getenv("FUZZ_WRITE_SEED");
    if (seed) write_seed(seed);
    return 0;
}

/* The first terms as a query, in both modes (the algorithms themselves are fuzz_index's). */
static void search_a_little(const isn_index *ix) {
    isn_searcher *searcher = isn_searcher_new(ix);
    if (!searcher) abort();
    char text[1200], term[300], err[ISN_ERR_LEN];
    size_t n = 0;
    for (uint32_t t = 0; t < isn_index_get_info(ix)->num_terms && t < 4; t++) {
        isn_index_term_text(ix, t, term, sizeof term);
        n += (size_t)snprintf(text + n, sizeof text - n, "%s ", term);
    }
    isn_query query;
    isn_hit hits[10];
    isn_search_options options;
    isn_search_options_default(&options);
    isn_search_stats stats;
    uint32_t num_hits;
    for (int mode = ISN_MODE_OR; mode <= ISN_MODE_AND; mode++) {
        options.mode = (isn_mode)mode;
        /* a query of too many terms is refused (terms may hold spaces); a search of a parsed one must run */
        if (isn_query_parse(searcher, text, strlen(text), &query, err, sizeof err) != 0) break;
        if (isn_search(searcher, &query, &options, hits, &num_hits, &stats, err, sizeof err) != 0) {
            fprintf(stderr, "a query of an imported index failed: %s\n", err);
            abort();
        }
    }
    isn_searcher_free(searcher);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_bytes(input, data, size);
    char err[ISN_ERR_LEN] = "";
    if (isn_ciff_import(input, out_dir, NULL, NULL, err, sizeof err) != 0) {
        if (!strstr(err, input)) {
            fprintf(stderr, "refused without naming the file: \"%s\"\n", err);
            abort();
        }
        return 0;
    }
    isn_index *ix = isn_index_open(out_dir, err, sizeof err);
    if (!ix || isn_index_verify(ix, err, sizeof err) != 0) {
        fprintf(stderr, "an accepted CIFF gave a bad index: %s\n", err);
        abort();
    }
    search_a_little(ix);
    isn_index_close(ix);
    if (isn_ciff_export(out_dir, exported, NULL, err, sizeof err) != 0 ||
        isn_ciff_import(exported, again_dir, NULL, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "the export of an accepted CIFF does not import: %s\n", err);
        abort();
    }
    return 0;
}
