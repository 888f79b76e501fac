/* Multi-layer perceptron for the second stage.
 *
 * Weight file (text, whitespace-separated tokens, '#' starts a comment to the end of the line):
 *     isn-mlp 1
 *     inputs N
 *     layer OUT relu|linear      then OUT x IN weights, row by row (row o: the weights into output o),
 *                                then OUT biases; IN is the previous layer's OUT (N for the first)
 *     ...                        more layers; the last one has OUT = 1 and is the score
 * Rows are evaluated in chunks, each layer as a small matrix product over the chunk. With AVX2, a layer
 * of 8 or more outputs runs 16 outputs of 4 rows at a time from a transposed copy of its weights: each
 * output's sum still runs over the inputs in order, one rounded multiply and one rounded add a term (no
 * fused multiply-add), so the numbers are the scalar loop's bit for bit; ISN_L2_KERNEL=scalar takes the
 * scalar loop (tests compare the two). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <immintrin.h>

#include "ranking/l2_internal.h"

#define MLP_CHUNK 64u
#define MLP_MAX_LAYERS 16u
#define MLP_MAX_WIDTH 4096u

typedef struct {
    uint32_t in, out;
    bool relu;
    float *weights; /* out x in */
    float *bias;
    /* the AVX2 path's copies: in x out_pad (weights_t[i * out_pad + o] = weights[o * in + i]) and out_pad
     * biases, zeros past out; NULL for layers of fewer than 8 outputs */
    uint32_t out_pad;
    float *weights_t, *bias_pad;
} mlp_layer;

#define MLP_SIMD_MIN_OUT 8u
#define MLP_SIMD_OUT 16u /* outputs a step: two vectors of 8 */
#define MLP_SIMD_ROWS 4u

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
        if (l->out >= MLP_SIMD_MIN_OUT) {
            l->out_pad = (l->out + MLP_SIMD_OUT - 1) / MLP_SIMD_OUT * MLP_SIMD_OUT;
            l->weights_t = calloc((size_t)l->in * l->out_pad, sizeof(float));
            l->bias_pad = calloc(l->out_pad, sizeof(float));
            if (!l->weights_t || !l->bias_pad) {
                isn_error(err, err_len, "%s: out of memory", path);
                goto fail;
            }
            for (uint32_t o = 0; o < l->out; o++) {
                for (uint32_t i = 0; i < l->in; i++)
                    l->weights_t[(size_t)i * l->out_pad + o] = l->weights[(size_t)o * l->in + i];
                l->bias_pad[o] = l->bias[o];
            }
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
        free(m->layers[i].weights_t);
        free(m->layers[i].bias_pad);
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

/* out[r][o] = act(bias[o] + sum_i w[o][i] * in[r][i]) for a chunk of rows; with `last`, input in - 1 of
 * row r is last[r] instead (added at its place in the sum, the order unchanged). */
static void dense(const mlp_layer *l, const float *in, size_t in_stride, const float *last, uint32_t rows, float *out) {
    const uint32_t from_rows = last ? l->in - 1 : l->in;
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = in + r * in_stride;
        float *y = out + (size_t)r * l->out;
        for (uint32_t o = 0; o < l->out; o++) {
            const float *w = l->weights + (size_t)o * l->in;
            float s = 0;
            for (uint32_t i = 0; i < from_rows; i++)
                s += w[i] * x[i];
            if (last)
                s += w[from_rows] * last[r];
            s += l->bias[o];
            y[o] = l->relu && s < 0 ? 0 : s;
        }
    }
}

/* Rows [r0, r0 + R) of the chunk, outputs [o0, o0 + 16) (R <= MLP_SIMD_ROWS): acc[k][v] sums row k's
 * outputs o0 + 8v .. in input order, as dense() does for each output alone. */
__attribute__((target("avx2"))) static inline void dense_avx2_block(const mlp_layer *l, const float *in,
                                                                    size_t in_stride, const float *last, uint32_t r0,
                                                                    uint32_t R, uint32_t o0, float *out) {
    const uint32_t from_rows = last ? l->in - 1 : l->in, P = l->out_pad;
    const __m256 zero = _mm256_setzero_ps();
    __m256 acc[MLP_SIMD_ROWS][2];
    for (uint32_t k = 0; k < MLP_SIMD_ROWS; k++)
        acc[k][0] = acc[k][1] = zero;
    const float *x = in + (size_t)r0 * in_stride, *w = l->weights_t + o0;
    if (R == MLP_SIMD_ROWS) {
        for (uint32_t i = 0; i < from_rows; i++, w += P) {
            const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
            for (uint32_t k = 0; k < MLP_SIMD_ROWS; k++) {
                const __m256 xk = _mm256_set1_ps(x[k * in_stride + i]);
                acc[k][0] = _mm256_add_ps(acc[k][0], _mm256_mul_ps(w0, xk));
                acc[k][1] = _mm256_add_ps(acc[k][1], _mm256_mul_ps(w1, xk));
            }
        }
    } else {
        for (uint32_t i = 0; i < from_rows; i++, w += P) {
            const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
            for (uint32_t k = 0; k < R; k++) {
                const __m256 xk = _mm256_set1_ps(x[k * in_stride + i]);
                acc[k][0] = _mm256_add_ps(acc[k][0], _mm256_mul_ps(w0, xk));
                acc[k][1] = _mm256_add_ps(acc[k][1], _mm256_mul_ps(w1, xk));
            }
        }
    }
    const __m256 w0 = last ? _mm256_loadu_ps(w) : zero, w1 = last ? _mm256_loadu_ps(w + 8) : zero;
    const __m256 b0 = _mm256_loadu_ps(l->bias_pad + o0), b1 = _mm256_loadu_ps(l->bias_pad + o0 + 8);
    for (uint32_t k = 0; k < R; k++) {
        if (last) {
            const __m256 xk = _mm256_set1_ps(last[r0 + k]);
            acc[k][0] = _mm256_add_ps(acc[k][0], _mm256_mul_ps(w0, xk));
            acc[k][1] = _mm256_add_ps(acc[k][1], _mm256_mul_ps(w1, xk));
        }
        float y[MLP_SIMD_OUT];
        for (uint32_t v = 0; v < 2; v++) {
            __m256 s = _mm256_add_ps(acc[k][v], v ? b1 : b0);
            if (l->relu) /* s < 0 ? 0 : s, as the scalar loop: NaN and -0 stay */
                s = _mm256_andnot_ps(_mm256_cmp_ps(s, zero, _CMP_LT_OQ), s);
            _mm256_storeu_ps(y + 8 * v, s);
        }
        const uint32_t n = l->out - o0 < MLP_SIMD_OUT ? l->out - o0 : MLP_SIMD_OUT;
        memcpy(out + (size_t)(r0 + k) * l->out + o0, y, n * sizeof(float));
    }
}

__attribute__((target("avx2"))) static void dense_avx2(const mlp_layer *l, const float *in, size_t in_stride,
                                                       const float *last, uint32_t rows, float *out) {
    for (uint32_t o0 = 0; o0 < l->out; o0 += MLP_SIMD_OUT)
        for (uint32_t r0 = 0; r0 < rows; r0 += MLP_SIMD_ROWS)
            dense_avx2_block(l, in, in_stride, last, r0, rows - r0 < MLP_SIMD_ROWS ? rows - r0 : MLP_SIMD_ROWS, o0,
                             out);
}

/* AVX2 when the CPU has it and ISN_L2_KERNEL is not "scalar". */
static bool use_avx2(void) {
    static int has = -1;
    if (__atomic_load_n(&has, __ATOMIC_RELAXED) < 0) {
        __builtin_cpu_init();
        __atomic_store_n(&has, __builtin_cpu_supports("avx2") ? 1 : 0, __ATOMIC_RELAXED);
    }
    const char *want = getenv("ISN_L2_KERNEL");
    return __atomic_load_n(&has, __ATOMIC_RELAXED) && !(want && strcmp(want, "scalar") == 0);
}

void isn_mlp_predict_last(const isn_mlp *m, const float *rows, uint32_t n, uint32_t stride, const float *last,
                          float *scratch, float *out) {
    float *a = scratch, *b = scratch + (size_t)MLP_CHUNK * m->max_width;
    const bool simd = use_avx2();
    for (uint32_t r0 = 0; r0 < n; r0 += MLP_CHUNK) {
        uint32_t cnt = n - r0 < MLP_CHUNK ? n - r0 : MLP_CHUNK;
        const float *in = rows + (size_t)r0 * stride;
        size_t in_stride = stride;
        for (uint32_t i = 0; i < m->num_layers; i++) {
            float *dst = i % 2 ? b : a;
            const mlp_layer *l = &m->layers[i];
            const float *l_last = i == 0 && last ? last + r0 : NULL;
            if (simd && l->weights_t)
                dense_avx2(l, in, in_stride, l_last, cnt, dst);
            else
                dense(l, in, in_stride, l_last, cnt, dst);
            in = dst;
            in_stride = m->layers[i].out;
        }
        for (uint32_t r = 0; r < cnt; r++)
            out[r0 + r] = in[r];
    }
}

void isn_mlp_predict(const isn_mlp *m, const float *rows, uint32_t n, uint32_t stride, float *scratch, float *out) {
    isn_mlp_predict_last(m, rows, n, stride, NULL, scratch, out);
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
