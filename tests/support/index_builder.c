#include "tests/support/index_builder.h"
#include "tests/support/files.h"
#include "base/base.h"
#include "index/format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void support_plain_build_options(isn_build_options *options) {
    isn_build_options_default(options);
    options->num_fields = 1;
    snprintf(options->fields[0], sizeof options->fields[0], "body");
    options->analyzer.stem = false;
    options->analyzer.stopwords = false;
    options->order = ISN_ORDER_INPUT;
    options->positions = false;
    options->partitions = 1;
    options->progress = false;
}

int support_index_build(support_index *ix, const char *name, const isn_build_options *options, uint32_t num_docs,
                        support_doc_text doc_text, void *user) {
    memset(ix, 0, sizeof *ix);
    isn_build_options plain;
    if (options == NULL) {
        support_plain_build_options(&plain);
        options = &plain;
    }
    snprintf(ix->dir, sizeof ix->dir, "/tmp/isn-test-%s-XXXXXX", name);
    isn_builder *builder = isn_builder_new(options);
    if (mkdtemp(ix->dir) == NULL || builder == NULL) {
        perror("support_index_build");
        isn_builder_free(builder);
        return -1;
    }
    static char text[16384];
    char id[16], err[ISN_ERR_LEN] = "";
    int rc = 0;
    for (uint32_t d = 0; d < num_docs && rc == 0; d++) {
        size_t len = doc_text(user, d, text, sizeof text);
        snprintf(id, sizeof id, "d%u", d);
        const char *fields[1] = {text};
        size_t lens[1] = {len};
        rc = isn_builder_add(builder, id, fields, lens, 0.0f, err, sizeof err);
    }
    if (rc == 0)
        rc = isn_builder_write(builder, ix->dir, NULL, err, sizeof err);
    isn_builder_free(builder);
    if (rc == 0 && (ix->index = isn_index_open(ix->dir, err, sizeof err)) == NULL)
        rc = -1;
    if (rc == 0 && (ix->searcher = isn_searcher_new(ix->index)) == NULL)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "support_index_build %s: %s\n", ix->dir, err);
    return rc;
}

void support_jsonl_build_options(isn_build_options *options) {
    isn_build_options_default(options);
    options->analyzer.stem = false;
    options->analyzer.stopwords = false;
    options->progress = false;
}

int support_index_build_jsonl(support_index *ix, const char *name, const isn_build_options *options,
                              support_jsonl_writer write_docs, void *user) {
    memset(ix, 0, sizeof *ix);
    snprintf(ix->dir, sizeof ix->dir, "/tmp/isn-test-%s-XXXXXX", name);
    if (mkdtemp(ix->dir) == NULL) {
        perror("support_index_build_jsonl");
        return -1;
    }
    char input[128], out[128], err[ISN_ERR_LEN] = "";
    snprintf(input, sizeof input, "%s/docs.jsonl", ix->dir);
    snprintf(out, sizeof out, "%s/index", ix->dir);
    FILE *f = fopen(input, "w");
    if (!f) {
        perror(input);
        return -1;
    }
    write_docs(user, f);
    if (fclose(f) != 0) {
        perror(input);
        return -1;
    }
    isn_build_summary summary;
    int rc = isn_build_from_file(input, out, options, &summary, err, sizeof err);
    if (rc == 0 && (ix->index = isn_index_open(out, err, sizeof err)) == NULL) rc = -1;
    if (rc == 0 && (ix->searcher = isn_searcher_new(ix->index)) == NULL) rc = -1;
    if (rc != 0) fprintf(stderr, "support_index_build_jsonl %s: %s\n", out, err);
    return rc;
}

void support_index_close(support_index *ix) {
    isn_searcher_free(ix->searcher);
    isn_index_close(ix->index);
    if (ix->dir[0])
        support_remove_tree(ix->dir);
    memset(ix, 0, sizeof *ix);
}

int support_search_text(isn_searcher *searcher, const char *text, isn_mode mode, isn_algo algo, uint32_t k,
                        isn_hit *hits, uint32_t *num_hits, char *err) {
    isn_query query;
    if (isn_query_parse(searcher, text, strlen(text), &query, err, ISN_ERR_LEN) != 0)
        return -1;
    isn_search_options options = support_search_options(mode, algo, k);
    isn_search_stats stats;
    return isn_search(searcher, &query, &options, hits, num_hits, &stats, err, ISN_ERR_LEN);
}

isn_search_options support_search_options(isn_mode mode, isn_algo algo, uint32_t k) {
    isn_search_options options;
    isn_search_options_default(&options);
    options.mode = mode;
    options.algo = algo;
    options.k = k;
    return options;
}

long support_doc_id_number(const isn_index *index, uint32_t doc, const char *prefix) {
    size_t len, prefix_len = strlen(prefix);
    const char *id = isn_index_doc_id(index, doc, &len);
    if (len <= prefix_len || len - prefix_len > 18 || memcmp(id, prefix, prefix_len) != 0) return -1;
    long n = 0;
    for (size_t i = prefix_len; i < len; i++) {
        if (id[i] < '0' || id[i] > '9') return -1;
        n = n * 10 + (id[i] - '0');
    }
    return n;
}

void support_reseal_index(uint8_t *data, int section) {
    isn_file_header *header = (isn_file_header *)data;
    isn_section_entry *table = (isn_section_entry *)(data + sizeof *header);
    table[section].checksum = isn_hash64(data + table[section].offset, table[section].bytes);
    header->header_checksum = isn_index_header_checksum(header, table);
}
