/* SIMD tree-ensemble evaluation (depth <= 6), many rows per instruction and no gathers on the walk.
 *
 * Rows go through in groups of 32, transposed so that one input of the 32 rows is one contiguous
 * vector. A tree is taken level by level: EVERY real split of the level is compared against the 32
 * rows (one vector compare with the threshold broadcast, no data-dependent loads), the outcome of
 * split j setting bit j of a per-row word; the row's position in the next level is then
 * 2 * pos + (word >> pos & 1). That is 2^depth - 1 compares per tree instead of depth dependent loads,
 * but 16 rows per compare, no branches and no pointer chasing, so it runs at the vector units' rate.
 * NaN follows each split's default: splits that send NaN right use the unordered "not less than"
 * compare, the others the ordered "greater or equal" (so x < threshold goes left, as in trees.h).
 * Each row adds its trees' leaves in model order, exactly as the scalar walk does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <immintrin.h>

#include "ranking/trees.h"

#define GROUP 64u           /* rows per pass: a split's threshold and bit are loaded once for all */
#define SIMD_MAX_INPUTS 128u /* wider models take the scalar walk (the transposed group stays in L1) */
#define TREES_PER_BLOCK 64u /* ~64 KiB of splits and leaves: a block stays in L2 across the row groups */

int forest_simd_build(isn_forest *f) {
    const uint32_t D = f->depth;
    if (D == 0 || D > FOREST_SIMD_MAX_DEPTH)
        return 0;
    const size_t splits = ((size_t)1 << D) - 1, total = splits * f->num_trees;
    size_t real = 0;
    for (size_t i = 0; i < total; i++)
        real += !isnan(f->pad_threshold[i]);
    f->simd_splits = malloc((real ? real : 1) * sizeof *f->simd_splits);
    f->simd_start = malloc(((size_t)f->num_trees * D * 2 + 1) * sizeof *f->simd_start);
    if (!f->simd_splits || !f->simd_start)
        return -1;
    uint32_t n = 0;
    for (uint32_t t = 0; t < f->num_trees; t++)
        for (uint32_t level = 0; level < D; level++) {
            uint32_t first = (1u << level) - 1;
            for (uint32_t nan_right = 0; nan_right < 2; nan_right++) {
                f->simd_start[2 * ((size_t)t * D + level) + nan_right] = n;
                for (uint32_t j = 0; j <= first; j++) {
                    size_t i = (size_t)t * splits + first + j;
                    if (isnan(f->pad_threshold[i]) || f->pad_nan_right[i] != nan_right)
                        continue; /* padding always goes left: its bit stays 0 */
                    f->simd_splits[n++] = (forest_simd_split){.x_offset = f->pad_feature[i] * GROUP,
                                                              .threshold = f->pad_threshold[i], .bit = 1u << j};
                }
            }
        }
    f->simd_start[(size_t)f->num_trees * D * 2] = n;
    return 0;
}

/* ------------------------------------------------------------------ AVX-512: 4 x 16 rows */

#define LEVEL_512(PRED, FROM, TO)                                                                         \
    for (const forest_simd_split *s = (FROM); s < (TO); s++) {                                           \
        const __m512 thr = _mm512_set1_ps(s->threshold);                                                 \
        const __m512i bit = _mm512_set1_epi32((int)s->bit);                                              \
        const float *x = xt + s->x_offset;                                                               \
        r0 = _mm512_mask_or_epi32(r0, _mm512_cmp_ps_mask(_mm512_load_ps(x), thr, PRED), r0, bit);        \
        r1 = _mm512_mask_or_epi32(r1, _mm512_cmp_ps_mask(_mm512_load_ps(x + 16), thr, PRED), r1, bit);   \
        r2 = _mm512_mask_or_epi32(r2, _mm512_cmp_ps_mask(_mm512_load_ps(x + 32), thr, PRED), r2, bit);   \
        r3 = _mm512_mask_or_epi32(r3, _mm512_cmp_ps_mask(_mm512_load_ps(x + 48), thr, PRED), r3, bit);   \
    }

__attribute__((target("avx512f"))) static void group_avx512(const isn_forest *f, const float *xt, uint32_t t0,
                                                               uint32_t t1, float *acc_f, double *acc_d) {
    const uint32_t D = f->depth;
    const size_t leaves = (size_t)1 << D;
    const forest_simd_split *sp = f->simd_splits;
    const __m512i one = _mm512_set1_epi32(1);
    __m512 af[4];
    __m512d ad[8];
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 8; v++)
        ad[v] = acc_d ? _mm512_loadu_pd(acc_d + 8 * v) : _mm512_setzero_pd();
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 4; v++)
        af[v] = acc_d ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_f + 16 * v);
    for (uint32_t t = t0; t < t1; t++) {
        const uint32_t *st = f->simd_start + 2 * (size_t)t * D;
        __m512i p[4];
        _Pragma("GCC unroll 8")
        for (int v = 0; v < 4; v++)
            p[v] = _mm512_setzero_si512();
        for (uint32_t level = 0; level < D; level++, st += 2) {
            __m512i r0 = _mm512_setzero_si512(), r1 = r0, r2 = r0, r3 = r0;
            LEVEL_512(_CMP_GE_OQ, sp + st[0], sp + st[1])
            LEVEL_512(_CMP_NLT_UQ, sp + st[1], sp + st[2])
            const __m512i r[4] = {r0, r1, r2, r3};
            _Pragma("GCC unroll 8")
            for (int v = 0; v < 4; v++)
                p[v] = _mm512_add_epi32(_mm512_add_epi32(p[v], p[v]), _mm512_and_si512(_mm512_srlv_epi32(r[v], p[v]), one));
        }
        if (acc_d) {
            const double *lv = f->pad_leaf_d + t * leaves;
            _Pragma("GCC unroll 8")
            for (int v = 0; v < 4; v++) {
                ad[2 * v] = _mm512_add_pd(ad[2 * v], _mm512_i32gather_pd(_mm512_castsi512_si256(p[v]), lv, 8));
                ad[2 * v + 1] = _mm512_add_pd(ad[2 * v + 1], _mm512_i32gather_pd(_mm512_extracti64x4_epi64(p[v], 1), lv, 8));
            }
        } else {
            const float *lv = f->pad_leaf_f + t * leaves;
            _Pragma("GCC unroll 8")
            for (int v = 0; v < 4; v++)
                af[v] = _mm512_add_ps(af[v], _mm512_i32gather_ps(p[v], lv, 4));
        }
    }
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 8 && acc_d; v++)
        _mm512_storeu_pd(acc_d + 8 * v, ad[v]);
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 4 && !acc_d; v++)
        _mm512_storeu_ps(acc_f + 16 * v, af[v]);
}

/* ------------------------------------------------------------------ AVX2: 2 x 4 x 8 rows */

#define LEVEL_256(PRED, FROM, TO)                                                                         \
    for (const forest_simd_split *s = (FROM); s < (TO); s++) {                                           \
        const __m256 thr = _mm256_set1_ps(s->threshold);                                                 \
        const __m256i bit = _mm256_set1_epi32((int)s->bit);                                              \
        const float *x = xt + s->x_offset;                                                               \
        _Pragma("GCC unroll 8") for (int v = 0; v < 4; v++)                                              \
            r[v] = _mm256_or_si256(                                                                      \
                r[v], _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(_mm256_load_ps(x + 8 * v), thr, PRED)), bit)); \
    }

__attribute__((target("avx2"))) static void half_avx2(const isn_forest *f, const float *xt, uint32_t t0, uint32_t t1,
                                                        float *acc_f, double *acc_d) {
    const uint32_t D = f->depth;
    const size_t leaves = (size_t)1 << D;
    const forest_simd_split *sp = f->simd_splits;
    const __m256i one = _mm256_set1_epi32(1);
    __m256 af[4];
    __m256d ad[8];
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 8; v++)
        ad[v] = acc_d ? _mm256_loadu_pd(acc_d + 4 * v) : _mm256_setzero_pd();
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 4; v++)
        af[v] = acc_d ? _mm256_setzero_ps() : _mm256_loadu_ps(acc_f + 8 * v);
    for (uint32_t t = t0; t < t1; t++) {
        const uint32_t *st = f->simd_start + 2 * (size_t)t * D;
        __m256i p[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
        for (uint32_t level = 0; level < D; level++, st += 2) {
            __m256i r[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                            _mm256_setzero_si256()};
            LEVEL_256(_CMP_GE_OQ, sp + st[0], sp + st[1])
            LEVEL_256(_CMP_NLT_UQ, sp + st[1], sp + st[2])
            _Pragma("GCC unroll 8")
            for (int v = 0; v < 4; v++)
                p[v] = _mm256_add_epi32(_mm256_add_epi32(p[v], p[v]), _mm256_and_si256(_mm256_srlv_epi32(r[v], p[v]), one));
        }
        if (acc_d) {
            const double *lv = f->pad_leaf_d + t * leaves;
            _Pragma("GCC unroll 8")
            for (int v = 0; v < 4; v++) {
                ad[2 * v] = _mm256_add_pd(ad[2 * v], _mm256_i32gather_pd(lv, _mm256_castsi256_si128(p[v]), 8));
                ad[2 * v + 1] = _mm256_add_pd(ad[2 * v + 1], _mm256_i32gather_pd(lv, _mm256_extracti128_si256(p[v], 1), 8));
            }
        } else {
            const float *lv = f->pad_leaf_f + t * leaves;
            _Pragma("GCC unroll 8")
            for (int v = 0; v < 4; v++)
                af[v] = _mm256_add_ps(af[v], _mm256_i32gather_ps(lv, p[v], 4));
        }
    }
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 8 && acc_d; v++)
        _mm256_storeu_pd(acc_d + 4 * v, ad[v]);
    _Pragma("GCC unroll 8")
    for (int v = 0; v < 4 && !acc_d; v++)
        _mm256_storeu_ps(acc_f + 8 * v, af[v]);
}

/* AVX2 has 16 vector registers: the group is taken as two halves of 32 rows. */
__attribute__((target("avx2"))) static void group_avx2(const isn_forest *f, const float *xt, uint32_t t0, uint32_t t1,
                                                         float *acc_f, double *acc_d) {
    half_avx2(f, xt, t0, t1, acc_f, acc_d);
    half_avx2(f, xt + GROUP / 2, t0, t1, acc_f ? acc_f + GROUP / 2 : NULL, acc_d ? acc_d + GROUP / 2 : NULL);
}

/* ------------------------------------------------------------------ driver */

typedef void (*group_fn)(const isn_forest *, const float *, uint32_t, uint32_t, float *, double *);

static group_fn pick_kernel(void) {
    static group_fn chosen;
    static int picked;
    if (!__atomic_load_n(&picked, __ATOMIC_ACQUIRE)) {
        __builtin_cpu_init();
        group_fn fn = __builtin_cpu_supports("avx512f") ? group_avx512
                      : __builtin_cpu_supports("avx2")  ? group_avx2
                                                        : NULL;
        __atomic_store_n(&chosen, fn, __ATOMIC_RELAXED);
        __atomic_store_n(&picked, 1, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&chosen, __ATOMIC_RELAXED);
}

/* ISN_L2_KERNEL=scalar|avx2|avx512 picks a path (tests and benchmarks compare them); default the best. */
static group_fn kernel_for_env(void) {
    const char *want = getenv("ISN_L2_KERNEL");
    group_fn best = pick_kernel();
    if (want == NULL || best == NULL)
        return best;
    if (strcmp(want, "scalar") == 0)
        return NULL;
    if (strcmp(want, "avx2") == 0)
        return group_avx2; /* every AVX-512 CPU has AVX2 */
    return best;
}

bool forest_simd_predict(const isn_forest *f, const float *rows, uint32_t m, uint32_t stride, float *acc_f,
                         double *acc_d) {
    group_fn kernel = f->simd_start && f->num_inputs <= SIMD_MAX_INPUTS ? kernel_for_env() : NULL;
    if (kernel == NULL || m == 0)
        return false;
    _Alignas(64) float xt[SIMD_MAX_INPUTS * GROUP];
    float tail_f[GROUP];
    double tail_d[GROUP];
    const uint32_t ni = f->num_inputs;
    for (uint32_t g0 = 0; g0 < m; g0 += GROUP) {
        uint32_t lanes = m - g0 < GROUP ? m - g0 : GROUP;
        for (uint32_t lane = 0; lane < GROUP; lane++) { /* short groups repeat their last row */
            const float *row = rows + (size_t)(g0 + (lane < lanes ? lane : lanes - 1)) * stride;
            for (uint32_t i = 0; i < ni; i++)
                xt[i * GROUP + lane] = row[i];
        }
        float *af = acc_d ? NULL : lanes == GROUP ? acc_f + g0 : tail_f;
        double *ad = acc_d ? (lanes == GROUP ? acc_d + g0 : tail_d) : NULL;
        if (lanes < GROUP) {
            if (ad) memcpy(tail_d, acc_d + g0, lanes * sizeof *tail_d);
            else memcpy(tail_f, acc_f + g0, lanes * sizeof *tail_f);
        }
        for (uint32_t t0 = 0; t0 < f->num_trees; t0 += TREES_PER_BLOCK)
            kernel(f, xt, t0, t0 + TREES_PER_BLOCK < f->num_trees ? t0 + TREES_PER_BLOCK : f->num_trees, af, ad);
        if (lanes < GROUP) {
            if (ad) memcpy(acc_d + g0, tail_d, lanes * sizeof *tail_d);
            else memcpy(acc_f + g0, tail_f, lanes * sizeof *tail_f);
        }
    }
    return true;
}
