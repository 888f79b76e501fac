/* Multi-layer perceptron for the second stage.
 *
 * Weight file (text, whitespace-separated tokens, '#' starts a comment to the end of the line):
 *     isn-mlp 1
 *     inputs N
 *     layer OUT relu|linear      then OUT x IN weights, row by row (row o: the weights into output o),
 *                                then OUT biases; IN is the previous layer's OUT (N for the first)
 *     ...                        more layers; the last one has OUT = 1 and is the score
 * Rows are evaluated in chunks, each layer as a small matrix product over the chunk. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/l2_internal.h"

#define MLP_CHUNK 64u
#define MLP_MAX_LAYERS 16u
#define MLP_MAX_WIDTH 4096u

typedef struct {
    uint32_t in, out;
    bool relu;
    float *weights; /* out x in */
    float *bias;
} mlp_layer;

struct isn_mlp {
    uint64_t serial;
    uint32_t num_inputs, num_layers, max_width;
    mlp_layer layers[MLP_MAX_LAYERS];
};

typedef struct {
    FILE *in;
    char tok[64];
} tokens;

static const char *next_token(tokens *t) {
    int c;
    for (;;) {
        c = fgetc(t->in);
        if (c == '#')
            while (c != '\n' && c != EOF)
                c = fgetc(t->in);
        if (c == EOF)
            return NULL;
        if (!isspace(c))
            break;
    }
    size_t n = 0;
    while (c != EOF && !isspace(c) && n + 1 < sizeof t->tok) {
        t->tok[n++] = (char)c;
        c = fgetc(t->in);
    }
    t->tok[n] = 0;
    return t->tok;
}

static bool next_float(tokens *t, float *v) {
    const char *s = next_token(t);
    char *end;
    if (s == NULL)
        return false;
    *v = strtof(s, &end);
    return *end == 0;
}

static bool next_uint(tokens *t, uint32_t *v) {
    const char *s = next_token(t);
    char *end;
    if (s == NULL)
        return false;
    unsigned long x = strtoul(s, &end, 10);
    *v = (uint32_t)x;
    return *end == 0 && x > 0 && x <= MLP_MAX_WIDTH;
}

isn_mlp *isn_mlp_load(const char *path, char *err, size_t err_len) {
    tokens t = {.in = isn_fopen_regular(path, "r")};
    if (t.in == NULL) {
        isn_error(err, err_len, "%s: cannot open", path);
        return NULL;
    }
    isn_mlp *m = calloc(1, sizeof *m);
    if (m)
        m->serial = l2_serial();
    const char *s;
    uint32_t version;
    if (m == NULL || !(s = next_token(&t)) || strcmp(s, "isn-mlp") || !next_uint(&t, &version) || version != 1) {
        isn_error(err, err_len, "%s: not an ISN MLP file (expected \"isn-mlp 1\")", path);
        goto fail;
    }
    if (!(s = next_token(&t)) || strcmp(s, "inputs") || !next_uint(&t, &m->num_inputs)) {
        isn_error(err, err_len, "%s: expected \"inputs N\" (1..%u)", path, MLP_MAX_WIDTH);
        goto fail;
    }
    m->max_width = m->num_inputs;
    uint32_t in = m->num_inputs;
    while ((s = next_token(&t))) {
        if (strcmp(s, "layer") != 0 || m->num_layers == MLP_MAX_LAYERS) {
            isn_error(err, err_len, "%s: expected \"layer OUT relu|linear\" (at most %u layers), got '%s'",
                      path, MLP_MAX_LAYERS, s);
            goto fail;
        }
        mlp_layer *l = &m->layers[m->num_layers++];
        l->in = in;
        if (!next_uint(&t, &l->out) || !(s = next_token(&t)) || (strcmp(s, "relu") && strcmp(s, "linear"))) {
            isn_error(err, err_len, "%s: layer %u: expected OUT (1..%u) and relu or linear", path,
                      m->num_layers, MLP_MAX_WIDTH);
            goto fail;
        }
        l->relu = strcmp(s, "relu") == 0;
        l->weights = malloc((size_t)l->out * l->in * sizeof(float));
        l->bias = malloc(l->out * sizeof(float));
        if (!l->weights || !l->bias) {
            isn_error(err, err_len, "%s: out of memory", path);
            goto fail;
        }
        for (size_t i = 0; i < (size_t)l->out * l->in; i++)
            if (!next_float(&t, &l->weights[i])) {
                isn_error(err, err_len, "%s: layer %u: weight %zu of %u x %u missing or not a number", path,
                          m->num_layers, i, l->out, l->in);
                goto fail;
            }
        for (uint32_t i = 0; i < l->out; i++)
            if (!next_float(&t, &l->bias[i])) {
                isn_error(err, err_len, "%s: layer %u: bias %u of %u missing or not a number", path,
                          m->num_layers, i, l->out);
                goto fail;
            }
        in = l->out;
        m->max_width = l->out > m->max_width ? l->out : m->max_width;
    }
    if (m->num_layers == 0 || in != 1) {
        isn_error(err, err_len, "%s: the last layer must have 1 output (the score)", path);
        goto fail;
    }
    fclose(t.in);
    return m;
fail:
    fclose(t.in);
    isn_mlp_free(m);
    return NULL;
}

void isn_mlp_free(isn_mlp *m) {
    if (m == NULL)
        return;
    for (uint32_t i = 0; i < m->num_layers; i++) {
        free(m->layers[i].weights);
        free(m->layers[i].bias);
    }
    free(m);
}

uint32_t isn_mlp_num_inputs(const isn_mlp *m) {
    return m->num_inputs;
}

size_t isn_mlp_scratch_floats(const isn_mlp *m, uint32_t n) {
    (void)n;
    return 2 * (size_t)MLP_CHUNK * m->max_width;
}

/* out[r][o] = act(bias[o] + sum_i w[o][i] * in[r][i]) for a chunk of rows. */
static void dense(const mlp_layer *l, const float *in, size_t in_stride, uint32_t rows, float *out) {
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = in + r * in_stride;
        float *y = out + (size_t)r * l->out;
        for (uint32_t o = 0; o < l->out; o++) {
            const float *w = l->weights + (size_t)o * l->in;
            float s = 0;
            for (uint32_t i = 0; i < l->in; i++)
                s += w[i] * x[i];
            s += l->bias[o];
            y[o] = l->relu && s < 0 ? 0 : s;
        }
    }
}

void isn_mlp_predict(const isn_mlp *m, const float *rows, uint32_t n, uint32_t stride, float *scratch, float *out) {
    float *a = scratch, *b = scratch + (size_t)MLP_CHUNK * m->max_width;
    for (uint32_t r0 = 0; r0 < n; r0 += MLP_CHUNK) {
        uint32_t cnt = n - r0 < MLP_CHUNK ? n - r0 : MLP_CHUNK;
        const float *in = rows + (size_t)r0 * stride;
        size_t in_stride = stride;
        for (uint32_t i = 0; i < m->num_layers; i++) {
            float *dst = i % 2 ? b : a;
            dense(&m->layers[i], in, in_stride, cnt, dst);
            in = dst;
            in_stride = m->layers[i].out;
        }
        for (uint32_t r = 0; r < cnt; r++)
            out[r0 + r] = in[r];
    }
}

uint64_t isn_mlp_serial(const isn_mlp *m) {
    return m->serial;
}

uint32_t isn_mlp_num_layers(const isn_mlp *m) {
    return m->num_layers;
}

void isn_mlp_layer_get(const isn_mlp *m, uint32_t layer, isn_mlp_layer_view *view) {
    const mlp_layer *l = &m->layers[layer];
    *view = (isn_mlp_layer_view){.in = l->in, .out = l->out, .relu = l->relu, .weights = l->weights, .bias = l->bias};
}
