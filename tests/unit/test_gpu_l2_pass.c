/* The second stage's one device pass (gpu.h isn_gpu_l2_pass) against the CPU, value by value: every
 * feature of every candidate equal to isn_features_extract's bit for bit, and every score equal to the
 * CPU's transforms and model (an MLP over every feature under each kind of transform, and XGBoost
 * forests whose thresholds are real feature values, so ties at the split are met: one over every
 * feature, and on the first index one over 300 inputs, wider than the GPU's one-thread-a-row tree
 * kernel takes; and a stacked ranker, a forest `then mlp`, whose CPU score is computed here the long
 * way: the trees, then the MLP over rows copied out with the trees' score appended). Indexes: Cranfield
 * with positions over title and body (a synthetic collection of the same shape without
 * ../shared/data), the body alone without positions, both fields without positions; the first stage's
 * best 100 and 1,000 of every query, eight queries a batch. The emulated device (the pass's packed
 * buffer and per-thread steps run on the host) always runs; with a GPU the CUDA pass runs too, and must
 * be equal as well (ranking/feature_rows.h: no fused multiply-add, no library logarithm). */
#include <setjmp.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/files.h"

#define BATCH 8
#define MAX_QUERIES 240
#define SYNTHETIC_DOCS 1400

static char dir[64];
static char *queries[MAX_QUERIES];
static uint32_t num_queries;
static isn_gpu_l2 *gpu;
static char no_gpu_reason[256];
static bool cranfield;

static uint64_t rng = 20261129;
static uint32_t rnd(uint32_t bound) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % bound;
}

/* ------------------------------------------------------------------ data */

static char *synthetic_text(uint32_t words) {
    char *text = malloc(words * 8 + 1);
    assert_non_null(text);
    size_t at = 0;
    for (uint32_t w = 0; w < words; w++) /* a skewed vocabulary: common words repeat, proximity happens */
        at += (size_t)sprintf(text + at, "%sw%u", w ? " " : "", rnd(1 + rnd(400)));
    text[at] = 0;
    return text;
}

/* Cranfield's documents and queries when ../shared/data built them, else synthetic ones. */
static void load_collection(json_t **docs) {
    const char *cran = getenv("ISN_CRANFIELD_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/cranfield.jsonl", cran ? cran : "build/data/cran");
    FILE *in = fopen(path, "r");
    *docs = json_array();
    if (in) {
        char line[65536];
        while (fgets(line, sizeof line, in)) json_array_append_new(*docs, json_loads(line, 0, NULL));
        fclose(in);
        snprintf(path, sizeof path, "%s/cranfield.queries.tsv", cran ? cran : "build/data/cran");
        FILE *q = fopen(path, "r");
        assert_non_null(q);
        while (num_queries < MAX_QUERIES && fgets(line, sizeof line, q)) {
            char *text = strchr(line, '\t');
            assert_non_null(text);
            text[strcspn(text, "\n")] = 0;
            queries[num_queries++] = strdup(text + 1);
        }
        fclose(q);
        cranfield = true;
        return;
    }
    fprintf(stderr, "test_gpu_l2_pass: no %s: a synthetic collection instead\n", path);
    for (uint32_t d = 0; d < SYNTHETIC_DOCS; d++) {
        char id[32];
        snprintf(id, sizeof id, "doc-%u.%s", d, d % 3 ? "w7" : "x");
        char *title = synthetic_text(2 + rnd(8)), *body = synthetic_text(20 + rnd(200));
        json_array_append_new(*docs, json_pack("{s:s,s:s,s:s}", "id", id, "title", title, "body", body));
        free(title);
        free(body);
    }
    for (num_queries = 0; num_queries < 120; num_queries++) queries[num_queries] = synthetic_text(1 + rnd(14));
}

/* An index of the collection's fields (title and body, or body alone), with or without positions. */
static isn_index *build_index(json_t *docs, const char *name, bool title, bool positions) {
    isn_build_options o;
    isn_build_options_default(&o);
    o.num_fields = 0;
    if (title) snprintf(o.fields[o.num_fields++], sizeof o.fields[0], "title");
    snprintf(o.fields[o.num_fields++], sizeof o.fields[0], "body");
    o.positions = positions;
    o.progress = false;
    isn_builder *b = isn_builder_new(&o);
    assert_non_null(b);
    char err[ISN_ERR_LEN];
    size_t i;
    json_t *doc;
    json_array_foreach(docs, i, doc) {
        const char *fields[2], *t = json_string_value(json_object_get(doc, "title"));
        const char *body = json_string_value(json_object_get(doc, "body"));
        uint32_t nf = 0;
        if (title) fields[nf++] = t;
        fields[nf++] = body;
        size_t lens[2] = {strlen(fields[0]), nf > 1 ? strlen(fields[1]) : 0};
        if (lens[0] + lens[1] == 0) continue; /* a few Cranfield records have no text */
        /* a static score too, so that the prior feature is not all zeros */
        if (isn_builder_add(b, json_string_value(json_object_get(doc, "id")), fields, lens, (float)(i % 17) / 4.0f, err,
                            sizeof err) != 0)
            fail_msg("%s", err);
    }
    char out[128];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    if (isn_builder_write(b, out, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    isn_builder_free(b);
    isn_index *ix = isn_index_open(out, err, sizeof err);
    if (!ix) fail_msg("%s", err);
    return ix;
}

/* ------------------------------------------------------------------ rankers */

static const char *transform_text(uint32_t f, const char *name, char *buf, size_t len) {
    switch (f % 5) {
    case 0: snprintf(buf, len, "input %s\n", name); break;
    case 1: snprintf(buf, len, "input %s linear 0.37 -1.5\n", name); break;
    case 2: snprintf(buf, len, "input %s log 1.1 0.25\n", name); break;
    case 3: snprintf(buf, len, "input %s bucket 0 0.5 1 2 4 8 16\n", name); break;
    default:
        snprintf(buf, len, "input tree 5\nsplit %s 1 1 2\nleaf -1\nsplit bm25 2.5 3 4\nleaf 0.5\nleaf 2\n", name);
    }
    return buf;
}

/* The inputs of the wide forest: more than the GPU's one-thread-a-row kernel takes (256), so that the
 * pass runs its trees with the kernel for wide rows. */
#define WIDE_INPUTS 300u

/* An MLP file: `inputs` inputs, a hidden layer of 8 ReLU units, the linear output. */
static void write_mlp(FILE *m, uint32_t inputs) {
    fprintf(m, "isn-mlp 1\ninputs %u\nlayer 8 relu\n", inputs);
    for (uint32_t o = 0; o < 8; o++, fputc('\n', m))
        for (uint32_t i = 0; i < inputs; i++) fprintf(m, "%.6f ", ((int)rnd(2001) - 1000) / 1000.0);
    for (uint32_t o = 0; o < 8; o++) fprintf(m, "%.3f ", ((int)rnd(201) - 100) / 100.0);
    fprintf(m, "\nlayer 1 linear\n");
    for (uint32_t o = 0; o < 8; o++) fprintf(m, "%.6f ", ((int)rnd(2001) - 1000) / 1000.0);
    fprintf(m, "\n0.125\n");
}

/* Every feature under each kind of transform in turn (inputs of them, cycling through the features),
 * then an MLP (two layers) or an XGBoost forest (trees of `depth` levels whose thresholds are
 * features of real candidates, sample) over them; stacked: the forest, then an MLP (NAME.head) over
 * the inputs and the trees' score. */
static isn_ranker *write_ranker(const isn_index *ix, const char *name, bool forest, bool stacked, uint32_t inputs,
                                uint32_t trees, uint32_t depth, const float *sample, uint32_t sample_rows) {
    const isn_index_info *info = isn_index_get_info(ix);
    const uint32_t nf = isn_feature_count(info);
    char path[160], model[160], buf[512], fname[ISN_FEATURE_NAME_MAX + ISN_FIELD_NAME_MAX];
    snprintf(path, sizeof path, "%s/%s.ranker", dir, name);
    snprintf(model, sizeof model, "%s/%s.model", dir, name);
    FILE *r = fopen(path, "w");
    assert_non_null(r);
    fprintf(r, "isn-ranker 1\nname %s\nmodel %s %s.model\n", name, forest ? "xgboost" : "mlp", name);
    if (stacked) {
        fprintf(r, "then mlp %s.head\n", name);
        snprintf(model, sizeof model, "%s/%s.head", dir, name);
        FILE *h = fopen(model, "w");
        assert_non_null(h);
        write_mlp(h, inputs + 1);
        assert_int_equal(fclose(h), 0);
        snprintf(model, sizeof model, "%s/%s.model", dir, name);
    }
    for (uint32_t f = 0; f < inputs; f++) {
        isn_feature_name(info, f % nf, fname, sizeof fname);
        fputs(transform_text(f, fname, buf, sizeof buf), r);
    }
    assert_int_equal(fclose(r), 0);
    FILE *m = fopen(model, "w");
    assert_non_null(m);
    if (!forest) {
        write_mlp(m, nf);
    } else {
        const uint32_t nodes = (1u << (depth + 1)) - 1, splits = (1u << depth) - 1;
        assert_true(depth <= 6);
        fprintf(m, "{\"learner\": {\"feature_names\": [], \"gradient_booster\": {\"name\": \"gbtree\", \"model\": {\"trees\": [");
        for (uint32_t t = 0; t < trees; t++) {
            uint32_t feat[128];
            float cond[128];
            for (uint32_t i = 0; i < nodes; i++) {
                feat[i] = rnd(inputs);
                cond[i] = i < splits ? sample[(size_t)rnd(sample_rows) * nf + feat[i] % nf] : ((int)rnd(2001) - 1000) / 1e4f;
                if (i < splits && cond[i] != cond[i]) cond[i] = 0; /* no NaN thresholds */
            }
            fprintf(m, "%s{\"left_children\": [", t ? ",\n" : "\n");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%d", i ? ", " : "", i < splits ? (int)(2 * i + 1) : -1);
            fprintf(m, "], \"right_children\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%d", i ? ", " : "", i < splits ? (int)(2 * i + 2) : -1);
            fprintf(m, "], \"split_conditions\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%.9g", i ? ", " : "", cond[i]);
            fprintf(m, "], \"split_indices\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%u", i ? ", " : "", i < splits ? feat[i] : 0);
            fprintf(m, "], \"default_left\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%u", i ? ", " : "", i % 2);
            fprintf(m, "], \"split_type\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s0", i ? ", " : "");
            fprintf(m, "]}");
        }
        fprintf(m, "]}},\n \"learner_model_param\": {\"base_score\": \"5E-1\", \"num_class\": \"0\", \"num_feature\": "
                   "\"%u\"}, \"objective\": {\"name\": \"rank:ndcg\"}}, \"version\": [1, 7, 4]}\n", inputs);
    }
    assert_int_equal(fclose(m), 0);
    char err[ISN_ERR_LEN];
    isn_ranker *rk = isn_ranker_load(path, info, err, sizeof err);
    if (!rk) fail_msg("%s: %s", path, err);
    return rk;
}

/* ------------------------------------------------------------------ the comparison */

static uint32_t ulp_distance(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    int64_t d = (int64_t)ia - ib;
    return (uint32_t)(d < 0 ? -d : d);
}

typedef struct {
    uint64_t rows, values;
} tally;

/* The device's rows and scores against the CPU's, bit for bit. */
static void compare(const char *what, const isn_index_info *info, const float *cpu_rows, const float *cpu_scores,
                    const float *dev_rows, const float *dev_scores, uint32_t n, tally *t) {
    const uint32_t nf = isn_feature_count(info);
    char name[ISN_FEATURE_NAME_MAX + ISN_FIELD_NAME_MAX];
    for (uint32_t r = 0; r < n; r++) {
        for (uint32_t f = 0; f < nf; f++) {
            float c = cpu_rows[(size_t)r * nf + f], d = dev_rows[(size_t)r * nf + f];
            if (memcmp(&c, &d, sizeof c) == 0) continue;
            uint32_t ulps = ulp_distance(c, d);
            isn_feature_name(info, f, name, sizeof name);
            fail_msg("%s: feature %s of candidate %u: CPU %.9g, device %.9g (%u ulps)", what, name, r, c, d, ulps);
        }
        if (memcmp(&cpu_scores[r], &dev_scores[r], sizeof(float)) != 0)
            fail_msg("%s: score of candidate %u: CPU %.9g, device %.9g", what, r, cpu_scores[r], dev_scores[r]);
    }
    t->rows += n;
    t->values += (uint64_t)n * nf;
}

/* Puts a pass's rows (of `width` floats) over gathered slices back in the candidates' order. */
static void unslice(const uint32_t *order, uint32_t n, uint32_t width, const float *from, float *to) {
    for (uint32_t r = 0; r < n; r++) memcpy(to + (size_t)order[r] * width, from + (size_t)r * width, width * sizeof(float));
}

/* wide: the forest of WIDE_INPUTS inputs too, and every batch gathered a second time on a crew of
 * threads in slices (isn_gpu_l2_gather), its passes compared the same way. */
static void check_index(isn_index *ix, const char *tag, const char *label, bool wide) {
    const isn_index_info *info = isn_index_get_info(ix);
    const uint32_t nf = isn_feature_count(info), n1s[2] = {100, 1000};
    isn_searcher *searcher = isn_searcher_new(ix);
    isn_l2_workspace *cpu_ws = isn_l2_workspace_new(ix), *ws[BATCH];
    for (int b = 0; b < BATCH; b++) ws[b] = isn_l2_workspace_new(ix);
    uint32_t cap = 1000 * BATCH;
    const uint32_t most_inputs = nf > WIDE_INPUTS ? nf : WIDE_INPUTS;
    float *cpu_rows = malloc((size_t)cap * nf * sizeof(float)), *cpu_inputs = malloc((size_t)cap * most_inputs * sizeof(float));
    float *cpu_scores = malloc(cap * sizeof(float)), *dev_rows = malloc((size_t)cap * nf * sizeof(float));
    float *dev_scores = malloc(cap * sizeof(float)), *mlp_scratch = NULL;
    isn_hit *hits = malloc(1000 * sizeof *hits);
    uint32_t *docs = malloc(1000 * sizeof *docs);
    /* the crew's batch: every query's candidates and terms kept until the batch is gathered */
    isn_gpu_l2_gather_crew *crew = wide ? isn_gpu_l2_gather_crew_new(ix, 3, 100) : NULL;
    uint32_t *crew_docs = malloc((size_t)cap * sizeof *crew_docs);
    float *sliced_rows = malloc((size_t)cap * nf * sizeof(float)), *sliced_scores = malloc(cap * sizeof(float));
    isn_query crew_query[BATCH];
    isn_query_term *crew_terms[BATCH] = {NULL};
    isn_gpu_l2_candidates crew_batch[BATCH];
    assert_true(!wide || crew);
    uint64_t crew_slices = 0, crew_batches = 0;
    assert_true(cpu_rows && cpu_inputs && cpu_scores && dev_rows && dev_scores && hits && docs);
    char err[ISN_ERR_LEN];

    /* A sample of real feature rows for the forest's thresholds: the first queries' candidates. */
    uint32_t sample_rows = 0;
    for (uint32_t q = 0; q < num_queries && sample_rows < 500; q++) {
        isn_query query;
        assert_int_equal(isn_query_parse(searcher, queries[q], strlen(queries[q]), &query, err, sizeof err), 0);
        isn_search_options o;
        isn_search_options_default(&o);
        o.k = 50;
        uint32_t n = 0;
        isn_search_stats st;
        assert_int_equal(isn_search(searcher, &query, &o, hits, &n, &st, err, sizeof err), 0);
        for (uint32_t i = 0; i < n; i++) docs[i] = hits[i].doc;
        if (sample_rows + n > cap) break;
        assert_int_equal(isn_features_extract(cpu_ws, &query, 0, docs, n, cpu_rows + (size_t)sample_rows * nf, err, sizeof err), 0);
        sample_rows += n;
    }
    assert_true(sample_rows > 0);
    char name[64];
    snprintf(name, sizeof name, "%s-mlp", tag);
    const int num_rankers = wide ? 4 : 3;
    isn_ranker *rankers[4] = {NULL, NULL, NULL, NULL};
    rankers[0] = write_ranker(ix, name, false, false, nf, 0, 0, cpu_rows, sample_rows);
    snprintf(name, sizeof name, "%s-forest", tag);
    rankers[1] = write_ranker(ix, name, true, false, nf, 30, 4, cpu_rows, sample_rows);
    /* stacked: on the first index over WIDE_INPUTS (the trees on the wide rows' kernel, then the MLP) */
    snprintf(name, sizeof name, "%s-stacked", tag);
    rankers[2] = write_ranker(ix, name, true, true, wide ? WIDE_INPUTS : nf, 30, 4, cpu_rows, sample_rows);
    snprintf(name, sizeof name, "%s-wide-forest", tag);
    if (wide) rankers[3] = write_ranker(ix, name, true, false, WIDE_INPUTS, 40, 6, cpu_rows, sample_rows);
    /* the stacked ranker's by-hand reference: its rows copied out with the trees' score appended */
    const uint32_t stacked_width = isn_ranker_num_inputs(rankers[2]) + 1;
    float *stacked_rows = malloc((size_t)cap * stacked_width * sizeof(float));
    size_t scratch_floats = isn_mlp_scratch_floats(isn_ranker_mlp(rankers[0]), cap);
    if (isn_mlp_scratch_floats(isn_ranker_mlp(rankers[2]), cap) > scratch_floats)
        scratch_floats = isn_mlp_scratch_floats(isn_ranker_mlp(rankers[2]), cap);
    mlp_scratch = malloc(scratch_floats * sizeof(float));
    assert_true(stacked_rows && mlp_scratch);
    assert_string_equal(isn_ranker_model_kind(rankers[2]), "xgboost+mlp");

    tally emulated = {0}, device = {0};
    for (int k = 0; k < num_rankers; k++) {
        const isn_ranker *rk = rankers[k];
        for (int s = 0; s < 2; s++) {
            for (uint32_t q0 = 0; q0 < num_queries; q0 += BATCH) {
                const isn_feature_hits *batch[BATCH];
                isn_feature_hits hits_of[BATCH];
                uint32_t nb = 0, rows = 0;
                for (uint32_t q = q0; q < num_queries && q < q0 + BATCH; q++) {
                    isn_query query;
                    assert_int_equal(isn_query_parse(searcher, queries[q], strlen(queries[q]), &query, err, sizeof err), 0);
                    isn_search_options o;
                    isn_search_options_default(&o);
                    o.k = n1s[s];
                    uint32_t n = 0;
                    isn_search_stats st;
                    assert_int_equal(isn_search(searcher, &query, &o, hits, &n, &st, err, sizeof err), 0);
                    for (uint32_t i = 0; i < n; i++) docs[i] = hits[i].doc;
                    /* the CPU's rows, then the hits of the same candidates for the device */
                    assert_int_equal(isn_features_extract(cpu_ws, &query, 0, docs, n, cpu_rows + (size_t)rows * nf, err,
                                                          sizeof err), 0);
                    if (isn_feature_hits_gather(ws[nb], &query, 0, docs, n, &hits_of[nb], err, sizeof err) != 0)
                        fail_msg("%s", err);
                    batch[nb] = &hits_of[nb];
                    crew_query[nb] = query;
                    crew_terms[nb] = realloc(crew_terms[nb], (query.num_terms + 1) * sizeof *query.terms);
                    memcpy(crew_terms[nb], query.terms, query.num_terms * sizeof *query.terms);
                    crew_query[nb].terms = crew_terms[nb];
                    memcpy(crew_docs + rows, docs, n * sizeof *docs);
                    crew_batch[nb] = (isn_gpu_l2_candidates){&crew_query[nb], 0, crew_docs + rows, n};
                    nb++;
                    rows += n;
                }
                isn_ranker_transform(rk, cpu_rows, nf, rows, cpu_inputs);
                const uint32_t ni = isn_ranker_num_inputs(rk);
                if (isn_ranker_forest(rk))
                    isn_forest_predict(isn_ranker_forest(rk), cpu_inputs, rows, ni, cpu_scores);
                if (isn_ranker_forest(rk) && isn_ranker_mlp(rk)) { /* stacked: the MLP over inputs + trees' score */
                    assert_int_equal(ni + 1, stacked_width);
                    for (uint32_t r = 0; r < rows; r++) {
                        memcpy(stacked_rows + (size_t)r * stacked_width, cpu_inputs + (size_t)r * ni, ni * sizeof(float));
                        stacked_rows[(size_t)r * stacked_width + ni] = cpu_scores[r];
                    }
                    isn_mlp_predict(isn_ranker_mlp(rk), stacked_rows, rows, stacked_width, mlp_scratch, cpu_scores);
                } else if (!isn_ranker_forest(rk)) {
                    isn_mlp_predict(isn_ranker_mlp(rk), cpu_inputs, rows, ni, mlp_scratch, cpu_scores);
                }
                char what[192];
                snprintf(what, sizeof what, "%s, %s of %u inputs, n1 %u, queries %u..%u, emulated", label,
                         isn_ranker_model_kind(rk), isn_ranker_num_inputs(rk), n1s[s], q0, q0 + nb - 1);
                memset(dev_rows, 0xFF, (size_t)rows * nf * sizeof(float));
                if (isn_gpu_l2_pass_emulated(rk, batch, nb, dev_scores, dev_rows, err, sizeof err) != 0)
                    fail_msg("%s: %s", what, err);
                compare(what, isn_index_get_info(ix), cpu_rows, cpu_scores, dev_rows, dev_scores, rows, &emulated);
                if (gpu) {
                    snprintf(what, sizeof what, "%s, %s of %u inputs, n1 %u, queries %u..%u, CUDA", label,
                             isn_ranker_model_kind(rk), isn_ranker_num_inputs(rk), n1s[s], q0, q0 + nb - 1);
                    memset(dev_rows, 0xFF, (size_t)rows * nf * sizeof(float));
                    if (isn_gpu_l2_pass(gpu, rk, batch, nb, dev_scores, dev_rows, NULL, err, sizeof err) != 0)
                        fail_msg("%s: %s", what, err);
                    compare(what, isn_index_get_info(ix), cpu_rows, cpu_scores, dev_rows, dev_scores, rows, &device);
                }
                if (!crew || rows == 0) continue;
                const isn_feature_hits *const *slices;
                const uint32_t *order;
                uint32_t num_slices = 0;
                if (isn_gpu_l2_gather(crew, crew_batch, nb, &slices, &num_slices, &order, err, sizeof err) != 0)
                    fail_msg("%s: crew: %s", what, err);
                crew_slices += num_slices;
                crew_batches += nb;
                for (int d = 0; d < (gpu ? 2 : 1); d++) {
                    snprintf(what, sizeof what, "%s, %s of %u inputs, n1 %u, queries %u..%u in %u slices, %s", label,
                             isn_ranker_model_kind(rk), isn_ranker_num_inputs(rk), n1s[s], q0, q0 + nb - 1, num_slices,
                             d ? "CUDA" : "emulated");
                    memset(sliced_rows, 0xFF, (size_t)rows * nf * sizeof(float));
                    int rc = d ? isn_gpu_l2_pass(gpu, rk, slices, num_slices, sliced_scores, sliced_rows, NULL, err, sizeof err)
                               : isn_gpu_l2_pass_emulated(rk, slices, num_slices, sliced_scores, sliced_rows, err, sizeof err);
                    if (rc != 0) fail_msg("%s: %s", what, err);
                    unslice(order, rows, nf, sliced_rows, dev_rows);
                    unslice(order, rows, 1, sliced_scores, dev_scores);
                    compare(what, isn_index_get_info(ix), cpu_rows, cpu_scores, dev_rows, dev_scores, rows,
                            d ? &device : &emulated);
                }
            }
        }
    }
    printf("test_gpu_l2_pass: %s: %llu candidate rows, %llu feature values equal on the emulated device", label,
           (unsigned long long)emulated.rows, (unsigned long long)emulated.values);
    if (gpu)
        printf("; CUDA: %llu rows, %llu values equal", (unsigned long long)device.rows,
               (unsigned long long)device.values);
    else
        printf("; CUDA pass not run: %s", no_gpu_reason);
    if (crew) printf("; gathered again on a crew of 3 threads: %llu queries in %llu slices", (unsigned long long)crew_batches,
                     (unsigned long long)crew_slices);
    printf("\n");
    /* a query of 1,000 candidates is cut (at least 100 a slice, 3 threads) */
    if (crew) assert_true(crew_slices > crew_batches);
    isn_gpu_l2_gather_crew_free(crew);
    for (int b = 0; b < BATCH; b++) free(crew_terms[b]);
    free(crew_docs), free(sliced_rows), free(sliced_scores), free(stacked_rows);
    for (int k = 0; k < num_rankers; k++) isn_ranker_free(rankers[k]);
    for (int b = 0; b < BATCH; b++) isn_l2_workspace_free(ws[b]);
    isn_l2_workspace_free(cpu_ws);
    isn_searcher_free(searcher);
    free(cpu_rows), free(cpu_inputs), free(cpu_scores), free(dev_rows), free(dev_scores), free(mlp_scratch);
    free(hits), free(docs);
}

static json_t *collection;

static void test_title_body_with_positions(void **state) {
    (void)state;
    isn_index *ix = build_index(collection, "title-body-positions", true, true);
    check_index(ix, "positions", cranfield ? "cranfield title+body, positions" : "synthetic title+body, positions",
                true);
    isn_index_close(ix);
}

static void test_body_alone_without_positions(void **state) {
    (void)state;
    isn_index *ix = build_index(collection, "body", false, false);
    check_index(ix, "body", "body alone, no positions", false);
    isn_index_close(ix);
}

static void test_title_body_without_positions(void **state) {
    (void)state;
    isn_index *ix = build_index(collection, "title-body", true, false);
    check_index(ix, "title-body", "title+body, no positions", false);
    isn_index_close(ix);
}

/* A batch from two indexes of different fields is refused, naming why. */
static void test_mixed_batch_refused(void **state) {
    (void)state;
    isn_feature_hits a = {0}, b = {0};
    a.query.num_fields = 2;
    b.query.num_fields = 1;
    const isn_feature_hits *batch[2] = {&a, &b};
    isn_index *ix = build_index(collection, "mixed", true, true);
    float sample[1] = {0};
    (void)sample;
    const isn_index_info *info = isn_index_get_info(ix);
    char path[160], err[ISN_ERR_LEN];
    snprintf(path, sizeof path, "%s/mixed.ranker", dir);
    FILE *r = fopen(path, "w");
    assert_non_null(r);
    fprintf(r, "isn-ranker 1\nname mixed\nmodel mlp mixed.mlp\ninput bm25\n");
    fclose(r);
    snprintf(path, sizeof path, "%s/mixed.mlp", dir);
    r = fopen(path, "w");
    assert_non_null(r);
    fprintf(r, "isn-mlp 1\ninputs 1\nlayer 1 linear\n1\n0\n");
    fclose(r);
    snprintf(path, sizeof path, "%s/mixed.ranker", dir);
    isn_ranker *rk = isn_ranker_load(path, info, err, sizeof err);
    assert_non_null(rk);
    float scores[4];
    assert_int_equal(isn_gpu_l2_pass_emulated(rk, batch, 2, scores, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "one index a batch"));
    isn_ranker_free(rk);
    isn_index_close(ix);
}

/* ------------------------------------------------------------------ concurrent passes */

#define CONCURRENT_BATCHES 12
#define CONCURRENT_PER_BATCH 4
#define CONCURRENT_THREADS 4
#define CONCURRENT_ROUNDS 6

/* Distinct batches (different queries, n1 and so sizes), each gathered once, and the results one
 * pass at a time gave them. */
typedef struct {
    const isn_ranker *ranker;
    uint32_t nf;
    const isn_feature_hits *batch[CONCURRENT_BATCHES][CONCURRENT_PER_BATCH];
    uint32_t num[CONCURRENT_BATCHES], rows[CONCURRENT_BATCHES];
    float *scores[CONCURRENT_BATCHES], *features[CONCURRENT_BATCHES];
    isn_gpu_l2_emulated *emulated; /* the device: this, else the GPU handle */
    isn_gpu_l2 *cuda;
} concurrent_case;

typedef struct {
    concurrent_case *c;
    uint32_t thread;
    uint64_t passes, differ, failed;
    char err[ISN_ERR_LEN];
} concurrent_worker;

/* Each thread runs every batch CONCURRENT_ROUNDS times in its own order, on the one shared device
 * handle (fewer slots than threads), and compares every score and feature with the one-at-a-time
 * results. */
static void *concurrent_run(void *arg) {
    concurrent_worker *w = arg;
    concurrent_case *c = w->c;
    size_t most = 0;
    for (int b = 0; b < CONCURRENT_BATCHES; b++) most = c->rows[b] > most ? c->rows[b] : most;
    float *scores = malloc((most + 1) * sizeof(float)), *features = malloc((most * c->nf + 1) * sizeof(float));
    for (uint32_t k = 0; scores && features && k < CONCURRENT_ROUNDS * CONCURRENT_BATCHES; k++) {
        const uint32_t b = (k * (2 * w->thread + 1) + w->thread * 5) % CONCURRENT_BATCHES;
        memset(scores, 0xFF, (c->rows[b] + 1) * sizeof(float));
        memset(features, 0xFF, (c->rows[b] * c->nf + 1) * sizeof(float));
        int rc = c->emulated ? isn_gpu_l2_pass_on_emulated(c->emulated, c->ranker, c->batch[b], c->num[b], scores,
                                                            features, w->err, sizeof w->err)
                             : isn_gpu_l2_pass(c->cuda, c->ranker, c->batch[b], c->num[b], scores, features, NULL,
                                               w->err, sizeof w->err);
        if (rc != 0) {
            w->failed++;
            continue;
        }
        w->passes++;
        if (memcmp(scores, c->scores[b], c->rows[b] * sizeof(float)) != 0 ||
            memcmp(features, c->features[b], (size_t)c->rows[b] * c->nf * sizeof(float)) != 0)
            w->differ++;
    }
    free(scores);
    free(features);
    return NULL;
}

static void run_concurrent(concurrent_case *c, const char *device) {
    pthread_t threads[CONCURRENT_THREADS];
    concurrent_worker workers[CONCURRENT_THREADS];
    for (uint32_t t = 0; t < CONCURRENT_THREADS; t++) {
        workers[t] = (concurrent_worker){.c = c, .thread = t};
        assert_int_equal(pthread_create(&threads[t], NULL, concurrent_run, &workers[t]), 0);
    }
    uint64_t passes = 0;
    for (uint32_t t = 0; t < CONCURRENT_THREADS; t++) {
        assert_int_equal(pthread_join(threads[t], NULL), 0);
        if (workers[t].failed) fail_msg("%s: thread %u: %s", device, t, workers[t].err);
        if (workers[t].differ)
            fail_msg("%s: thread %u: %llu of its passes returned another batch's numbers (or mixed ones)", device, t,
                     (unsigned long long)workers[t].differ);
        passes += workers[t].passes;
    }
    assert_int_equal(passes, (uint64_t)CONCURRENT_THREADS * CONCURRENT_ROUNDS * CONCURRENT_BATCHES);
    printf("test_gpu_l2_pass: %s: %llu passes of %u distinct batches from %u threads at once, each equal to the "
           "same batch passed alone\n", device, (unsigned long long)passes, CONCURRENT_BATCHES, CONCURRENT_THREADS);
}

/* Passes from several threads at once on one handle (fewer in-flight slots than threads, so that slots
 * are waited for and reused by other threads' batches) return each thread its own batch's numbers. */
static void test_concurrent_passes(void **state) {
    (void)state;
    isn_index *ix = build_index(collection, "concurrent", true, true);
    const isn_index_info *info = isn_index_get_info(ix);
    concurrent_case c = {.nf = isn_feature_count(info)};
    isn_searcher *searcher = isn_searcher_new(ix);
    isn_l2_workspace *ws[CONCURRENT_BATCHES][CONCURRENT_PER_BATCH];
    isn_feature_hits hits_of[CONCURRENT_BATCHES][CONCURRENT_PER_BATCH];
    isn_hit *hits = malloc(400 * sizeof *hits);
    uint32_t *docs = malloc(400 * sizeof *docs);
    float *sample = malloc((size_t)400 * c.nf * sizeof(float));
    char err[ISN_ERR_LEN];
    uint32_t sample_rows = 0;
    for (uint32_t b = 0; b < CONCURRENT_BATCHES; b++) {
        for (uint32_t i = 0; i < CONCURRENT_PER_BATCH; i++) {
            const uint32_t q = (b * CONCURRENT_PER_BATCH + i) % num_queries;
            isn_query query;
            assert_int_equal(isn_query_parse(searcher, queries[q], strlen(queries[q]), &query, err, sizeof err), 0);
            isn_search_options o;
            isn_search_options_default(&o);
            o.k = 40 + 30 * ((b + i) % 12); /* batches of different sizes: slots grow while others fly */
            uint32_t n = 0;
            isn_search_stats st;
            assert_int_equal(isn_search(searcher, &query, &o, hits, &n, &st, err, sizeof err), 0);
            for (uint32_t j = 0; j < n; j++) docs[j] = hits[j].doc;
            ws[b][i] = isn_l2_workspace_new(ix);
            if (isn_feature_hits_gather(ws[b][i], &query, 0, docs, n, &hits_of[b][i], err, sizeof err) != 0)
                fail_msg("%s", err);
            c.batch[b][i] = &hits_of[b][i];
            c.rows[b] += n;
            if (b == 0 && sample_rows + n <= 400) {
                assert_int_equal(isn_features_extract(ws[b][i], &query, 0, docs, n, sample + (size_t)sample_rows * c.nf,
                                                      err, sizeof err), 0);
                if (isn_feature_hits_gather(ws[b][i], &query, 0, docs, n, &hits_of[b][i], err, sizeof err) != 0)
                    fail_msg("%s", err);
                sample_rows += n;
            }
        }
        c.num[b] = CONCURRENT_PER_BATCH;
    }
    assert_true(sample_rows > 0);
    isn_ranker *rk = write_ranker(ix, "concurrent-forest", true, false, c.nf, 30, 4, sample, sample_rows);
    c.ranker = rk;
    for (uint32_t b = 0; b < CONCURRENT_BATCHES; b++) {
        c.scores[b] = malloc((c.rows[b] + 1) * sizeof(float));
        c.features[b] = malloc(((size_t)c.rows[b] * c.nf + 1) * sizeof(float));
        if (isn_gpu_l2_pass_emulated(rk, c.batch[b], c.num[b], c.scores[b], c.features[b], err, sizeof err) != 0)
            fail_msg("%s", err);
    }
    c.emulated = isn_gpu_l2_emulated_new(2);
    assert_non_null(c.emulated);
    run_concurrent(&c, "emulated device, 2 slots");
    isn_gpu_l2_emulated_free(c.emulated);
    c.emulated = NULL;
    if (gpu) {
        isn_gpu_l2_options o;
        isn_gpu_l2_options_default(&o);
        o.pass_slots = 2;
        c.cuda = isn_gpu_l2_open(&o, err, sizeof err);
        if (!c.cuda) fail_msg("%s", err);
        run_concurrent(&c, "CUDA, 2 slots");
        isn_gpu_l2_close(c.cuda);
    } else {
        printf("test_gpu_l2_pass: concurrent CUDA passes not run: %s\n", no_gpu_reason);
    }
    for (uint32_t b = 0; b < CONCURRENT_BATCHES; b++) {
        free(c.scores[b]);
        free(c.features[b]);
        for (uint32_t i = 0; i < CONCURRENT_PER_BATCH; i++) isn_l2_workspace_free(ws[b][i]);
    }
    isn_ranker_free(rk);
    isn_searcher_free(searcher);
    free(hits), free(docs), free(sample);
    isn_index_close(ix);
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/isn-test-l2-pass-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    load_collection(&collection);
    isn_gpu_l2_options o;
    isn_gpu_l2_options_default(&o);
    gpu = isn_gpu_l2_open(&o, no_gpu_reason, sizeof no_gpu_reason);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    isn_gpu_l2_close(gpu);
    json_decref(collection);
    for (uint32_t q = 0; q < num_queries; q++) free(queries[q]);
    return support_remove_tree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_title_body_with_positions),
        cmocka_unit_test(test_body_alone_without_positions),
        cmocka_unit_test(test_title_body_without_positions),
        cmocka_unit_test(test_mixed_batch_refused),
        cmocka_unit_test(test_concurrent_passes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
