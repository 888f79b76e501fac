/* Query trees at corpus scale (issue 40, must-shows 1 and 2): generates mixed queries (phrases, +, -,
 * field:) and filtered ones from the corpus's own text, then checks every first-stage algorithm
 * (AUTO included) at k 10 and 1,000 against a brute-force checker over the documents' text: its own
 * inverted lists built from the corpus as analysed, phrase matches by position, its own BM25 in
 * double. Every hit must satisfy its query, the matching-document count must equal the checker's, the
 * top k must be the checker's (scores within 2e-5), and every algorithm must give the exhaustive
 * one's hits bit for bit. Writes the queries (qid, query text, filters) for the peers and prints JSON.
 *
 *   query_tree_check INDEX_DIR CORPUS.jsonl QUERIES_OUT.tsv [mixed=500] [filtered=200] [seed=1]
 *
 * The index must be built from CORPUS with --attribute source:keyword --attribute section:keyword
 * --attribute priority:keyword --attribute words:int (bench/peers/derive_attributes.py adds them). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "ranking/ranking.h"

#define MAX_CLAUSES 4
#define MAX_PHRASE 3
#define MISSING UINT32_MAX

typedef struct {
    uint32_t *terms; /* by position; MISSING where a stopword was */
    uint32_t num_positions;
    uint32_t len; /* emitted terms: the BM25 length */
} field_text;

typedef struct {
    field_text fields[2];
    char *raw[2];
    int64_t attributes[4];
} document;

typedef struct {
    uint32_t *docs;
    uint32_t count, cap;
} doc_list;

static document *docs;
static uint32_t num_docs;
static doc_list *lists; /* per term id: the documents holding it (any field), ascending */
static uint32_t num_terms;
static const isn_index *corpus_index;

/* ------------------------------------------------------------------ the corpus as analysed */

typedef struct {
    field_text *field;
    uint32_t cap;
} collect_state;

static void collect(void *ctx, const char *term, size_t len, uint32_t position) {
    collect_state *s = ctx;
    field_text *f = s->field;
    uint32_t id = MISSING;
    isn_index_find_term(corpus_index, term, len, &id);
    while (position >= s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        f->terms = realloc(f->terms, s->cap * sizeof *f->terms);
    }
    for (uint32_t p = f->num_positions; p < position; p++) f->terms[p] = MISSING;
    f->terms[position] = id;
    f->num_positions = position + 1;
    f->len++;
}

static void list_add(uint32_t term, uint32_t doc) {
    doc_list *l = &lists[term];
    if (l->count && l->docs[l->count - 1] == doc) return;
    if (l->count == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->docs = realloc(l->docs, l->cap * sizeof *l->docs);
    }
    l->docs[l->count++] = doc;
}

static void load_corpus(const char *path, const isn_index *index) {
    static const char *const attribute_names[4] = {"source", "section", "priority", "words"};
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    const isn_index_info *info = isn_index_get_info(index);
    num_docs = info->num_docs;
    num_terms = info->num_terms;
    docs = calloc(num_docs, sizeof *docs);
    lists = calloc(num_terms, sizeof *lists);
    /* documents by external id: the index's order is the checker's */
    isn_analyzer *analyzer = isn_index_new_analyzer(index);
    char *line = NULL;
    size_t cap = 0;
    uint32_t doc = 0;
    while (getline(&line, &cap, f) > 0 && doc < num_docs) {
        json_t *j = json_loads(line, 0, NULL);
        size_t id_len;
        const char *id = isn_index_doc_id(index, doc, &id_len);
        const char *jid = json_string_value(json_object_get(j, "id"));
        if (!jid || strlen(jid) != id_len || memcmp(jid, id, id_len) != 0) {
            fprintf(stderr, "query_tree_check: document %u of the index is not line %u of the corpus (build the "
                            "index in input order)\n", doc, doc + 1);
            exit(1);
        }
        static const char *const keys[2] = {"title", "body"};
        for (int fi = 0; fi < 2; fi++) {
            const char *text = json_string_value(json_object_get(j, keys[fi]));
            collect_state s = {.field = &docs[doc].fields[fi]};
            if (text) {
                isn_analyze(analyzer, text, strlen(text), collect, &s);
                docs[doc].raw[fi] = strdup(text);
            }
            for (uint32_t p = 0; p < docs[doc].fields[fi].num_positions; p++)
                if (docs[doc].fields[fi].terms[p] != MISSING) list_add(docs[doc].fields[fi].terms[p], doc);
        }
        for (int a = 0; a < 4; a++) {
            docs[doc].attributes[a] = ISN_ATTRIBUTE_MISSING;
            json_t *v = json_object_get(j, attribute_names[a]);
            if (json_is_integer(v)) docs[doc].attributes[a] = json_integer_value(v);
            else if (json_is_string(v)) {
                int64_t kid;
                if (isn_index_keyword_id(index, (uint32_t)a, json_string_value(v), json_string_length(v), &kid))
                    docs[doc].attributes[a] = kid;
            }
        }
        json_decref(j);
        doc++;
    }
    free(line);
    fclose(f);
    isn_analyzer_free(analyzer);
    if (doc != num_docs) {
        fprintf(stderr, "query_tree_check: the corpus has %u documents, the index %u\n", doc, num_docs);
        exit(1);
    }
}

/* ------------------------------------------------------------------ the checker */

typedef struct {
    int occur; /* isn_occur */
    int field; /* -1 whole */
    uint32_t n;
    uint32_t terms[MAX_PHRASE * 4];
    uint32_t offsets[MAX_PHRASE * 4];
    bool missing;
} check_clause;

typedef struct {
    int attribute, op;
    bool negate;
    uint32_t num_values;
    int64_t values[4];
} check_filter;

static uint32_t freq_in(const field_text *f, const check_clause *c) {
    uint32_t freq = 0;
    for (uint32_t p = 0; p + c->offsets[c->n - 1] < f->num_positions; p++) {
        uint32_t i = 0;
        while (i < c->n && f->terms[p + c->offsets[i]] == c->terms[i]) i++;
        freq += i == c->n;
    }
    return freq;
}

static uint32_t freq_of(uint32_t doc, const check_clause *c) {
    if (c->missing) return 0;
    if (c->field >= 0) return freq_in(&docs[doc].fields[c->field], c);
    return freq_in(&docs[doc].fields[0], c) + freq_in(&docs[doc].fields[1], c);
}

static bool filter_holds(uint32_t doc, const check_filter *f) {
    int64_t v = docs[doc].attributes[f->attribute];
    bool holds = false;
    if (v != ISN_ATTRIBUTE_MISSING) {
        if (f->op == ISN_FILTER_EQ)
            for (uint32_t i = 0; i < f->num_values; i++) holds |= v == f->values[i];
        else if (f->op == ISN_FILTER_GE) holds = v >= f->values[0];
        else if (f->op == ISN_FILTER_GT) holds = v > f->values[0];
        else if (f->op == ISN_FILTER_LE) holds = v <= f->values[0];
        else holds = v < f->values[0];
    }
    return holds != f->negate;
}

static bool matches(uint32_t doc, const check_clause *c, uint32_t n, const check_filter *filters, uint32_t nf) {
    for (uint32_t i = 0; i < nf; i++)
        if (!filter_holds(doc, &filters[i])) return false;
    bool required = false, should = false, positive = false;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t freq = freq_of(doc, &c[i]);
        if (c[i].occur == ISN_OCCUR_MUST_NOT) {
            if (freq) return false;
            continue;
        }
        positive = true;
        if (c[i].occur == ISN_OCCUR_MUST) {
            if (!freq) return false;
            required = true;
        } else if (freq) {
            should = true;
        }
    }
    return positive && (required || should);
}

typedef struct {
    uint32_t doc;
    double score;
} scored;

static int better(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->doc < y->doc ? -1 : (x->doc > y->doc);
}

static double field_avg[3];
static double field_docs[3];

static double idf(double n, double df) { return (float)log(1.0 + (n - df + 0.5) / (df + 0.5)); }

/* Every matching document scored (candidates: the documents of the positive clauses' terms). */
static uint32_t check_all(const check_clause *c, uint32_t n, const check_filter *filters, uint32_t nf, scored *out,
                          uint8_t *seen) {
    double weight[MAX_CLAUSES * 4];
    for (uint32_t i = 0; i < n; i++) {
        weight[i] = 0;
        if (c[i].occur == ISN_OCCUR_MUST_NOT || c[i].missing) continue;
        int slot = c[i].field + 1;
        for (uint32_t t = 0; t < c[i].n; t++) {
            double df = 0;
            const doc_list *l = &lists[c[i].terms[t]];
            if (c[i].field < 0) df = l->count;
            else
                for (uint32_t j = 0; j < l->count; j++) {
                    check_clause one = {.field = c[i].field, .n = 1, .terms = {c[i].terms[t]}};
                    df += freq_of(l->docs[j], &one) > 0;
                }
            weight[i] += idf(field_docs[slot], df);
        }
    }
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (c[i].occur == ISN_OCCUR_MUST_NOT || c[i].missing) continue;
        const doc_list *l = &lists[c[i].terms[0]];
        for (uint32_t j = 0; j < l->count; j++) {
            uint32_t doc = l->docs[j];
            if (seen[doc]) continue;
            seen[doc] = 1;
            if (!matches(doc, c, n, filters, nf)) continue;
            double score = 0;
            for (uint32_t k = 0; k < n; k++) {
                if (c[k].occur == ISN_OCCUR_MUST_NOT) continue;
                double tf = freq_of(doc, &c[k]);
                if (!tf) continue;
                double len = c[k].field >= 0 ? docs[doc].fields[c[k].field].len
                                             : docs[doc].fields[0].len + docs[doc].fields[1].len;
                double norm = 1.2 * (1 - 0.75 + 0.75 * len / field_avg[c[k].field + 1]);
                score += weight[k] * tf * 2.2 / (tf + norm);
            }
            out[count++] = (scored){doc, score};
        }
    }
    for (uint32_t i = 0; i < count; i++) seen[out[i].doc] = 0;
    for (uint32_t i = 0; i < n; i++) /* unmark the non-matching candidates too */
        if (c[i].occur != ISN_OCCUR_MUST_NOT && !c[i].missing)
            for (uint32_t j = 0; j < lists[c[i].terms[0]].count; j++) seen[lists[c[i].terms[0]].docs[j]] = 0;
    qsort(out, count, sizeof *out, better);
    return count;
}

/* ------------------------------------------------------------------ query generation */

static uint64_t rng = 88172645463325252ull;
static uint32_t below(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* A lower-case word of the field's raw text (letters only, 3+), or NULL. */
static const char *raw_words(const char *text, char words[][32], uint32_t *n) {
    *n = 0;
    for (const char *p = text; p && *p && *n < 256;) {
        while (*p && !(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z')) p++;
        const char *s = p;
        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) p++;
        if (p - s >= 3 && p - s < 31 && (*p == ' ' || *p == 0 || *p == ',' || *p == '.')) {
            for (int i = 0; i < p - s; i++) words[*n][i] = (char)(s[i] | 0x20);
            words[*n][p - s] = 0;
            (*n)++;
        } else if (p - s > 0 && *n > 0) {
            words[(*n)++][0] = 0; /* a break: phrases never span it */
        }
        if (!*p) break;
    }
    return text;
}

static void generate(char *out, size_t cap) {
    for (;;) {
        uint32_t doc = below(num_docs);
        static char words[2][256][32];
        uint32_t nw[2];
        raw_words(docs[doc].raw[0], words[0], &nw[0]);
        raw_words(docs[doc].raw[1], words[1], &nw[1]);
        if (nw[1] < 4) continue;
        size_t at = 0;
        uint32_t clauses = 2 + below(3);
        for (uint32_t c = 0; c < clauses; c++) {
            uint32_t kind = below(6);
            int field = kind == 4 && nw[0] ? 0 : 1;
            uint32_t i = below(nw[field]);
            const char *w = words[field][i];
            if (!w[0]) continue;
            const char *sep = at ? " " : "";
            if (kind == 0 && i + 1 < nw[field] && words[field][i + 1][0]) {
                if (i + 2 < nw[field] && words[field][i + 2][0] && below(2))
                    at += snprintf(out + at, cap - at, "%s\"%s %s %s\"", sep, w, words[field][i + 1], words[field][i + 2]);
                else
                    at += snprintf(out + at, cap - at, "%s\"%s %s\"", sep, w, words[field][i + 1]);
            } else if (kind == 1) {
                at += snprintf(out + at, cap - at, "%s+%s", sep, w);
            } else if (kind == 2) {
                static char other[256][32];
                uint32_t no;
                raw_words(docs[below(num_docs)].raw[1], other, &no);
                const char *x = no ? other[below(no)] : "";
                if (x[0]) at += snprintf(out + at, cap - at, "%s-%s", sep, x);
            } else if (kind == 4) {
                at += snprintf(out + at, cap - at, "%s%s:%s", sep, field ? "body" : "title", w);
            } else {
                at += snprintf(out + at, cap - at, "%s%s", sep, w);
            }
        }
        if (at) return;
    }
}

/* ------------------------------------------------------------------ main */

static int compile_clauses(isn_searcher *searcher, const char *text, const isn_query *query, check_clause *out,
                           uint32_t *n) {
    (void)query;
    isn_clause_spec specs[16];
    uint32_t ns;
    char err[ISN_ERR_LEN];
    if (isn_query_syntax_split(text, strlen(text), specs, 16, &ns, err, sizeof err) != 0) return -1;
    *n = 0;
    isn_analyzer *analyzer = isn_index_new_analyzer(corpus_index);
    for (uint32_t i = 0; i < ns; i++) {
        field_text ft = {0};
        collect_state s = {.field = &ft};
        isn_analyze(analyzer, specs[i].text, specs[i].text_len, collect, &s);
        int field = specs[i].field_len ? (specs[i].field[0] == 't' ? 0 : 1) : -1;
        uint32_t first = 0;
        while (first < ft.num_positions && ft.terms[first] == MISSING && ft.len) first++;
        if (specs[i].phrase) {
            check_clause c = {.occur = specs[i].occur, .field = field};
            for (uint32_t p = first; p < ft.num_positions; p++) {
                if (ft.terms[p] == MISSING) {
                    /* a stopword keeps its place; an unknown term (also MISSING here) cannot, since the
                     * corpus analysed alike holds every term: a query word always comes from a document */
                    continue;
                }
                c.terms[c.n] = ft.terms[p];
                c.offsets[c.n++] = p - first;
            }
            if (c.n) out[(*n)++] = c;
        } else {
            for (uint32_t p = 0; p < ft.num_positions; p++)
                if (ft.terms[p] != MISSING)
                    out[(*n)++] = (check_clause){.occur = specs[i].occur, .field = field, .n = 1, .terms = {ft.terms[p]}};
        }
        free(ft.terms);
        (void)searcher;
    }
    isn_analyzer_free(analyzer);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: query_tree_check INDEX_DIR CORPUS.jsonl QUERIES_OUT.tsv [mixed] [filtered] [seed]\n");
        return 2;
    }
    uint32_t num_mixed = argc > 4 ? (uint32_t)atoi(argv[4]) : 500, num_filtered = argc > 5 ? (uint32_t)atoi(argv[5]) : 200;
    if (argc > 6) rng += (uint64_t)atoll(argv[6]) * 0x9E3779B97F4A7C15ull;
    char err[ISN_ERR_LEN];
    isn_index *index = isn_index_open(argv[1], err, sizeof err);
    if (!index) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    corpus_index = index;
    if (isn_index_num_attributes(index) != 4) {
        fprintf(stderr, "query_tree_check: build the index with the four attributes (see the header)\n");
        return 1;
    }
    uint64_t t0 = isn_now_ns();
    load_corpus(argv[2], index);
    double load_s = (double)(isn_now_ns() - t0) / 1e9;
    for (int slot = 0; slot < 3; slot++) {
        double with = 0, total = 0;
        for (uint32_t d = 0; d < num_docs; d++) {
            double len = slot ? docs[d].fields[slot - 1].len : docs[d].fields[0].len + docs[d].fields[1].len;
            with += slot == 0 || len > 0;
            total += len;
        }
        field_docs[slot] = with;
        field_avg[slot] = total / with;
    }
    /* whole-document statistics are the index's own (every document counts, as in the bag of words) */
    field_docs[0] = num_docs;
    isn_searcher *searcher = isn_searcher_new(index);
    FILE *qout = fopen(argv[3], "w");
    static const isn_algo algos[] = {ISN_ALGO_OR, ISN_ALGO_AUTO, ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW,
                                     ISN_ALGO_BMM};
    static const uint32_t ks[] = {10, 1000};
    isn_hit *hits = calloc(1000, sizeof *hits), *reference = calloc(1000, sizeof *reference);
    scored *all = calloc(num_docs, sizeof *all);
    uint8_t *seen = calloc(num_docs, 1);
    static const char *const sources[] = {"debpkg", "gcide", "wordnet", "kjv", "fortunes", "linuxdoc"};
    static const char *const sections[] = {"python", "libs", "doc", "games", "net", "utils"};
    uint64_t hits_checked = 0, nonmatching_hits = 0, count_mismatches = 0, topk_mismatches = 0, algo_mismatches = 0,
             empty = 0, searches = 0;
    double max_rel_score_diff = 0;
    for (uint32_t q = 0; q < num_mixed + num_filtered; q++) {
        char text[512];
        generate(text, sizeof text);
        bool filtered = q >= num_mixed;
        isn_filter_spec specs[2];
        const char *values[2][4];
        char number[2][24];
        check_filter cf[2];
        uint32_t nf = 0;
        char filter_text[256] = "";
        if (filtered) {
            uint32_t kind = below(4);
            if (kind == 0) {
                uint32_t s = below(6);
                values[0][0] = sources[s];
                specs[0] = (isn_filter_spec){.attribute = "source", .op = ISN_FILTER_EQ, .values = values[0], .num_values = 1};
                snprintf(filter_text, sizeof filter_text, "source=%s", sources[s]);
            } else if (kind == 1) {
                uint32_t a = below(6), b = (a + 1 + below(5)) % 6;
                values[0][0] = sections[a];
                values[0][1] = sections[b];
                specs[0] = (isn_filter_spec){.attribute = "section", .op = ISN_FILTER_EQ, .values = values[0], .num_values = 2};
                snprintf(filter_text, sizeof filter_text, "section in {%s,%s}", sections[a], sections[b]);
            } else if (kind == 2) {
                uint32_t w = 5 + below(60);
                snprintf(number[0], sizeof number[0], "%u", w);
                values[0][0] = number[0];
                specs[0] = (isn_filter_spec){.attribute = "words", .op = ISN_FILTER_GE, .values = values[0], .num_values = 1};
                snprintf(filter_text, sizeof filter_text, "words>=%u", w);
            } else {
                values[0][0] = "optional";
                specs[0] = (isn_filter_spec){.attribute = "priority", .op = ISN_FILTER_EQ, .negate = true, .values = values[0], .num_values = 1};
                snprintf(filter_text, sizeof filter_text, "priority!=optional");
            }
            nf = 1;
            for (uint32_t f = 0; f < nf; f++) {
                cf[f] = (check_filter){.attribute = isn_index_attribute_find(index, specs[f].attribute, NULL),
                                       .op = specs[f].op, .negate = specs[f].negate};
                for (uint32_t v = 0; v < specs[f].num_values; v++) {
                    int64_t value;
                    if (specs[f].op == ISN_FILTER_EQ) {
                        if (!isn_index_keyword_id(index, (uint32_t)cf[f].attribute, specs[f].values[v],
                                                  strlen(specs[f].values[v]), &value))
                            continue;
                    } else {
                        value = atoll(specs[f].values[v]);
                    }
                    cf[f].values[cf[f].num_values++] = value;
                }
            }
        }
        fprintf(qout, "%s%u\t%s\t%s\n", filtered ? "f" : "m", q, text, filter_text);
        isn_query query;
        if (isn_query_parse_syntax(searcher, text, strlen(text), specs, nf, &query, err, sizeof err) != 0) {
            fprintf(stderr, "query %u '%s': %s\n", q, text, err);
            return 1;
        }
        check_clause clauses[MAX_CLAUSES * 4];
        uint32_t nc = 0;
        compile_clauses(searcher, text, &query, clauses, &nc);
        uint32_t expected = check_all(clauses, nc, cf, nf, all, seen);
        empty += expected == 0;
        for (uint32_t ki = 0; ki < 2; ki++) {
            uint32_t num_reference = 0;
            for (uint32_t a = 0; a < sizeof algos / sizeof *algos; a++) {
                isn_search_options options;
                isn_search_options_default(&options);
                options.k = ks[ki];
                options.algo = algos[a];
                isn_search_stats stats;
                uint32_t n;
                if (isn_search(searcher, &query, &options, hits, &n, &stats, err, sizeof err) != 0) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
                searches++;
                for (uint32_t i = 0; i < n; i++) {
                    hits_checked++;
                    if (!matches(hits[i].doc, clauses, nc, cf, nf)) {
                        nonmatching_hits++;
                        if (nonmatching_hits < 5) fprintf(stderr, "query '%s': hit %u does not match\n", text, hits[i].doc);
                    }
                }
                if (a == 0) {
                    if (stats.matched_lower_bound != expected) {
                        count_mismatches++;
                        if (count_mismatches < 5)
                            fprintf(stderr, "query '%s' [%s]: %llu matches, the checker %u\n", text, filter_text,
                                    (unsigned long long)stats.matched_lower_bound, expected);
                    }
                    uint32_t want = expected < ks[ki] ? expected : ks[ki];
                    bool same = n == want;
                    for (uint32_t i = 0; i < n && same; i++) {
                        double rel = fabs(hits[i].score - all[i].score) / (fabs(all[i].score) + 1e-12);
                        if (rel > max_rel_score_diff) max_rel_score_diff = rel;
                        same = rel < 2e-5 && (hits[i].doc == all[i].doc || fabs(all[i].score - hits[i].score) < 2e-5 * all[i].score);
                    }
                    if (!same) {
                        topk_mismatches++;
                        if (topk_mismatches < 5) fprintf(stderr, "query '%s' k=%u: top k differs from the checker's\n", text, ks[ki]);
                    }
                    memcpy(reference, hits, n * sizeof *hits);
                    num_reference = n;
                } else if (n != num_reference || memcmp(hits, reference, n * sizeof *hits) != 0) {
                    algo_mismatches++;
                    if (algo_mismatches < 5)
                        fprintf(stderr, "query '%s' k=%u: %s differs from or\n", text, ks[ki], isn_algo_name(algos[a]));
                }
            }
        }
    }
    fclose(qout);
    printf("{\"benchmark\":\"query_tree_check\",\"queries\":{\"mixed\":%u,\"filtered\":%u},\"corpus_docs\":%u,"
           "\"corpus_load_seconds\":%.1f,\"algorithms\":\"or,auto,maxscore,wand,bmw,bmm\",\"ks\":[10,1000],"
           "\"searches\":%llu,\"hits_checked\":%llu,\"hits_not_satisfying_query\":%llu,"
           "\"match_count_mismatches\":%llu,\"topk_mismatches_vs_checker\":%llu,\"algorithm_mismatches_vs_exhaustive\":%llu,"
           "\"queries_without_match\":%llu,\"max_relative_score_difference\":%.3g}\n",
           num_mixed, num_filtered, num_docs, load_s, (unsigned long long)searches, (unsigned long long)hits_checked,
           (unsigned long long)nonmatching_hits, (unsigned long long)count_mismatches,
           (unsigned long long)topk_mismatches, (unsigned long long)algo_mismatches, (unsigned long long)empty,
           max_rel_score_diff);
    isn_searcher_free(searcher);
    isn_index_close(index);
    return nonmatching_hits || count_mismatches || topk_mismatches || algo_mismatches ? 1 : 0;
}
