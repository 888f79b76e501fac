/* The Debian corpus and a query-tree log as Lucene gets them for the comparison of issue 40: both
 * analysed by ISN's analyzer, so that the two engines index and search the same terms at the same
 * positions (LuceneTreeWorker indexes the tokens with a whitespace tokenizer, and "_", which stands
 * for a stopword ISN removed, with a stop filter: the stopword's place is kept, as in ISN).
 *   lucene_export INDEX_DIR CORPUS.jsonl QUERIES.tsv CORPUS_OUT.tsv QUERIES_OUT.tsv
 * CORPUS_OUT: id TAB title tokens TAB body tokens TAB source TAB section TAB priority TAB words.
 * QUERIES_OUT: id TAB clauses TAB filter, clauses separated by ';', each OCCUR|FIELD|OFFSET:TERM,...
 * (OCCUR should, must or must_not; FIELD contents for the whole document, title or body); the filter
 * as the query log has it. Terms absent from the index are kept: they match nothing in either. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "ranking/ranking.h"

typedef struct {
    char *buf;
    size_t len, cap;
    uint32_t next_position;
    uint32_t first;
    bool any;
} token_out;

static void append(token_out *o, const char *text, size_t len) {
    if (o->len + len + 2 > o->cap) {
        o->cap = 2 * (o->len + len + 2);
        o->buf = realloc(o->buf, o->cap);
    }
    memcpy(o->buf + o->len, text, len);
    o->len += len;
    o->buf[o->len] = '\0';
}

/* Document text: every position, "_" for a removed stopword. */
static void doc_token(void *ctx, const char *term, size_t len, uint32_t position) {
    token_out *o = ctx;
    for (; o->next_position < position; o->next_position++) append(o, o->len ? " _" : "_", o->len ? 2 : 1);
    if (o->len) append(o, " ", 1);
    append(o, term, len);
    o->next_position = position + 1;
}

/* Query clause terms: OFFSET:TERM, offsets from the first term. */
typedef struct {
    token_out out;
    const char *prefix; /* per term: "OCC|FIELD|" when each term is a clause of its own */
    bool phrase;
} clause_out;

static void query_token(void *ctx, const char *term, size_t len, uint32_t position) {
    clause_out *c = ctx;
    token_out *o = &c->out;
    if (!o->any) o->first = position;
    char offset[16];
    if (!c->phrase) {
        if (o->len) append(o, ";", 1);
        append(o, c->prefix, strlen(c->prefix));
        append(o, "0:", 2);
    } else {
        if (o->any) append(o, ",", 1);
        snprintf(offset, sizeof offset, "%u:", position - o->first);
        append(o, offset, strlen(offset));
    }
    append(o, term, len);
    o->any = true;
}

int main(int argc, char **argv) {
    if (argc != 6 && !(argc == 7 && strcmp(argv[6], "plain") == 0)) {
        fprintf(stderr, "usage: lucene_export INDEX_DIR CORPUS.jsonl|- QUERIES.tsv CORPUS_OUT.tsv|- QUERIES_OUT.tsv [plain]\n"
                        "  (plain: each query a bag of words, every term a SHOULD clause over contents)\n");
        return 2;
    }
    bool plain = argc == 7;
    char err[ISN_ERR_LEN];
    isn_index *index = isn_index_open(argv[1], err, sizeof err);
    if (!index) return fprintf(stderr, "%s\n", err), 1;
    isn_analyzer *analyzer = isn_index_new_analyzer(index);
    char *line = NULL;
    size_t cap = 0;
    FILE *in = NULL, *out = NULL;
    if (strcmp(argv[2], "-") == 0) goto queries;
    in = fopen(argv[2], "r");
    out = fopen(argv[4], "w");
    if (!in || !out) return perror("lucene_export"), 1;
    static const char *const attributes[3] = {"source", "section", "priority"};
    while (getline(&line, &cap, in) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j) continue;
        fprintf(out, "%s", json_string_value(json_object_get(j, "id")));
        static const char *const keys[2] = {"title", "body"};
        for (int f = 0; f < 2; f++) {
            token_out o = {0};
            const char *text = json_string_value(json_object_get(j, keys[f]));
            if (text) isn_analyze(analyzer, text, strlen(text), doc_token, &o);
            fprintf(out, "\t%s", o.len ? o.buf : "");
            free(o.buf);
        }
        for (int a = 0; a < 3; a++) {
            const char *v = json_string_value(json_object_get(j, attributes[a]));
            fprintf(out, "\t%s", v ? v : "");
        }
        json_t *words = json_object_get(j, "words");
        fprintf(out, "\t%lld\n", json_is_integer(words) ? (long long)json_integer_value(words) : -1LL);
        json_decref(j);
    }
    fclose(in);
    fclose(out);
queries:;
    isn_query_log log;
    if (isn_query_log_read(argv[3], false, 0, &log, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    out = fopen(argv[5], "w");
    static isn_clause_spec specs[ISN_MAX_QUERY_CLAUSES];
    for (size_t q = 0; q < log.count; q++) {
        char *text = log.queries[q].text, *filter = strchr(text, '\t');
        if (filter) *filter++ = '\0';
        uint32_t n = 1;
        if (plain) specs[0] = (isn_clause_spec){.occur = ISN_OCCUR_SHOULD, .text = text, .text_len = strlen(text)};
        else if (isn_query_syntax_split(text, strlen(text), specs, ISN_MAX_QUERY_CLAUSES, &n, err, sizeof err) != 0)
            return fprintf(stderr, "query %s: %s\n", log.queries[q].id, err), 1;
        token_out all = {0};
        for (uint32_t i = 0; i < n; i++) {
            static const char *const occurs[3] = {"should", "must", "must_not"};
            char prefix[64];
            snprintf(prefix, sizeof prefix, "%s|%.*s|", occurs[specs[i].occur], specs[i].field_len ? (int)specs[i].field_len : 8,
                     specs[i].field_len ? specs[i].field : "contents");
            clause_out c = {.prefix = prefix, .phrase = specs[i].phrase};
            isn_analyze(analyzer, specs[i].text, specs[i].text_len, query_token, &c);
            if (!c.out.any) continue;
            if (all.len) append(&all, ";", 1);
            if (c.phrase) append(&all, prefix, strlen(prefix));
            append(&all, c.out.buf, c.out.len);
            free(c.out.buf);
        }
        fprintf(out, "%s\t%s\t%s\n", log.queries[q].id, all.len ? all.buf : "", filter ? filter : "");
        free(all.buf);
    }
    fclose(out);
    isn_query_log_free(&log);
    free(line);
    isn_analyzer_free(analyzer);
    isn_index_close(index);
    return 0;
}
