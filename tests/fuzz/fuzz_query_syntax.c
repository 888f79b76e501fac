/* The query parser and query trees: any bytes as query text against a small two-field index. The
 * split's clauses must lie inside the text; a query that parses must search alike with the exhaustive
 * algorithm and the pruning ones (same hits, same order: both score each document the same way), in
 * both modes, each within the memory it laid out; an error must say something. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/index.h"
#include "ranking/ranking.h"

static char index_dir[64];
static isn_index *fuzz_index;
static isn_searcher *fuzz_searcher;

static void remove_index(void) {
    char path[128];
    isn_searcher_free(fuzz_searcher);
    isn_index_close(fuzz_index);
    snprintf(path, sizeof path, "%s/" ISN_INDEX_FILE, index_dir);
    unlink(path);
    rmdir(index_dir);
}

static void open_index(void) {
    static const char *const titles[] = {"image editor", "python web framework", "the image viewer", "",
                                         "editor for images and text", "django python"};
    static const char *const bodies[] = {"a simple image editor for the desktop with layers",
                                         "django is a python web framework python python",
                                         "view an image view images quickly", "text editor text editor",
                                         "edit images and text; an editor of images", "web framework for python"};
    isn_build_options options;
    isn_build_options_default(&options);
    options.num_fields = 2;
    snprintf(options.fields[0], sizeof options.fields[0], "title");
    snprintf(options.fields[1], sizeof options.fields[1], "body");
    options.progress = false;
    isn_builder *builder = isn_builder_new(&options);
    char err[ISN_ERR_LEN];
    snprintf(index_dir, sizeof index_dir, "/tmp/isn-fuzz-query-XXXXXX");
    if (!builder || !mkdtemp(index_dir)) abort();
    for (uint32_t round = 0; round < 40; round++)
        for (uint32_t d = 0; d < 6; d++) {
            char id[32];
            snprintf(id, sizeof id, "d%u-%u", round, d);
            const char *fields[2] = {titles[(d + round) % 6], bodies[(d * 7 + round) % 6]};
            size_t lens[2] = {strlen(fields[0]), strlen(fields[1])};
            if (isn_builder_add(builder, id, fields, lens, 0.0f, err, sizeof err) != 0) abort();
        }
    isn_build_summary summary;
    if (isn_builder_write(builder, index_dir, &summary, err, sizeof err) != 0) abort();
    isn_builder_free(builder);
    fuzz_index = isn_index_open(index_dir, err, sizeof err);
    fuzz_searcher = fuzz_index ? isn_searcher_new(fuzz_index) : NULL;
    if (!fuzz_searcher) abort();
    atexit(remove_index);
}

static void search_alike(const isn_query *query, isn_mode mode, isn_algo reference, isn_algo pruning, uint32_t k) {
    static isn_hit a[64], b[64];
    isn_search_options options;
    isn_search_options_default(&options);
    options.mode = mode;
    options.k = k;
    uint32_t na = 0, nb = 0;
    char err[ISN_ERR_LEN];
    isn_search_stats stats;
    options.algo = reference;
    if (isn_search(fuzz_searcher, query, &options, a, &na, &stats, err, sizeof err) != 0) abort();
    if (stats.arena_overrun_bytes) abort(); /* the search took more than it laid out */
    options.algo = pruning;
    if (isn_search(fuzz_searcher, query, &options, b, &nb, &stats, err, sizeof err) != 0) abort();
    if (stats.arena_overrun_bytes) abort();
    if (na != nb) abort();
    for (uint32_t i = 0; i < na; i++)
        if (a[i].doc != b[i].doc || a[i].score != b[i].score) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_searcher) open_index();
    const char *text = (const char *)data;
    static isn_clause_spec specs[ISN_MAX_QUERY_CLAUSES];
    uint32_t n = 0;
    char err[ISN_ERR_LEN] = "";
    if (isn_query_syntax_split(text, size, specs, ISN_MAX_QUERY_CLAUSES, &n, err, sizeof err) == 0) {
        for (uint32_t i = 0; i < n; i++) {
            const isn_clause_spec *s = &specs[i];
            if (s->offset >= size || s->text < text || s->text + s->text_len > text + size) abort();
            if (s->field_len && (s->field < text || s->field + s->field_len > text + size)) abort();
        }
    } else if (!err[0]) {
        abort();
    }
    isn_query query;
    err[0] = '\0';
    if (isn_query_parse_syntax(fuzz_searcher, text, size, NULL, 0, &query, err, sizeof err) != 0) {
        if (!err[0]) abort();
        return 0;
    }
    uint32_t k = 1 + (size % 40);
    search_alike(&query, ISN_MODE_OR, ISN_ALGO_OR, size % 2 ? ISN_ALGO_MAXSCORE : ISN_ALGO_AUTO, k);
    search_alike(&query, ISN_MODE_AND, ISN_ALGO_AND, ISN_ALGO_BMAND, k);
    char described[512];
    isn_query_structure_describe(fuzz_searcher, &query, described, sizeof described);
    return 0;
}
