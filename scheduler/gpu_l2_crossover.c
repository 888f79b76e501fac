/* Where the second stage runs: a per-device line (fixed cost + cost per candidate-tree) fitted to
 * measured times by decayed least squares, so the crossover moves with the machine, the load and the
 * models actually served. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/scheduler_internal.h"

/* Starting lines (H200 vs one CPU thread, issue 6 notes): the CPU ~9.8 ns per candidate-tree plus
 * ~20 us of fixed work; the GPU ~200 us per call (copies, launch, model lookup) plus ~0.3 ns per
 * candidate-tree. They cross near 21,000 candidate-trees: 100 trees x ~210, 300 x ~70, 1,000 x ~21. */
#define CPU_FIXED_NS 20000.0
#define CPU_PER_WORK_NS 9.8
#define GPU_FIXED_NS 200000.0
#define GPU_PER_WORK_NS 0.3
/* The starting lines weigh as this many measurements (two points each), then fade. */
#define PRIOR_WEIGHT 8.0

static void add_point(double *s, double x, double y, double weight) {
    s[0] += weight;
    s[1] += weight * x;
    s[2] += weight * x * x;
    s[3] += weight * y;
    s[4] += weight * x * y;
}

/* Least squares a + b x; b is kept >= 0 (more work never costs less) and a >= 0. */
static void refit(isn_l2_crossover *c, int d) {
    const double *s = c->s[d];
    double det = s[0] * s[2] - s[1] * s[1];
    if (s[0] <= 0) return;
    double b = det > 1e-9 * s[0] * s[2] ? (s[0] * s[4] - s[1] * s[3]) / det : 0.0;
    if (!(b >= 0)) b = 0;
    double a = (s[3] - b * s[1]) / s[0];
    if (a < 0) {
        a = 0;
        b = s[2] > 0 ? s[4] / s[2] : b;
    }
    c->a[d] = a;
    c->b[d] = b;
}

isn_l2_crossover *isn_l2_crossover_new(void) {
    isn_l2_crossover *c = calloc(1, sizeof *c);
    pthread_mutex_t *lock = malloc(sizeof *lock);
    if (!c || !lock) {
        free(c);
        free(lock);
        return NULL;
    }
    pthread_mutex_init(lock, NULL);
    c->lock = lock;
    c->forgetting = 0.98;
    c->explore_every = 32;
    const double fixed[ISN_DEVICE_KINDS] = {CPU_FIXED_NS, GPU_FIXED_NS};
    const double per[ISN_DEVICE_KINDS] = {CPU_PER_WORK_NS, GPU_PER_WORK_NS};
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        /* Two points spanning the range served (one small and one large call). */
        add_point(c->s[d], 1e3, fixed[d] + per[d] * 1e3, PRIOR_WEIGHT / 2);
        add_point(c->s[d], 1e6, fixed[d] + per[d] * 1e6, PRIOR_WEIGHT / 2);
        refit(c, d);
    }
    return c;
}

void isn_l2_crossover_free(isn_l2_crossover *c) {
    if (!c) return;
    pthread_mutex_destroy(c->lock);
    free(c->lock);
    free(c);
}

void isn_l2_crossover_set_explore_every(isn_l2_crossover *c, uint32_t explore_every) {
    pthread_mutex_lock(c->lock);
    c->explore_every = explore_every;
    pthread_mutex_unlock(c->lock);
}

void isn_l2_crossover_get_stats(isn_l2_crossover *c, isn_l2_crossover_stats *stats) {
    pthread_mutex_lock(c->lock);
    stats->decisions = c->decisions;
    stats->explored = c->explored;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        stats->chosen[d] = c->chosen[d];
        stats->measured[d] = c->measured[d];
        stats->fixed_ns[d] = c->a[d];
        stats->ns_per_work[d] = c->b[d];
    }
    pthread_mutex_unlock(c->lock);
}

double isn_l2_work(uint32_t candidates, uint32_t trees) {
    return (double)candidates * (double)(trees ? trees : 1);
}

double isn_l2_crossover_predict_ns(isn_l2_crossover *c, isn_device_kind d, double work) {
    pthread_mutex_lock(c->lock);
    double ns = c->a[d] + c->b[d] * work;
    pthread_mutex_unlock(c->lock);
    return ns;
}

isn_device_kind isn_l2_crossover_choose(isn_l2_crossover *c, double work, bool gpu_available) {
    if (!gpu_available) return ISN_DEVICE_CPU;
    pthread_mutex_lock(c->lock);
    double cpu = c->a[ISN_DEVICE_CPU] + c->b[ISN_DEVICE_CPU] * work;
    double gpu = c->a[ISN_DEVICE_GPU] + c->b[ISN_DEVICE_GPU] * work;
    isn_device_kind best = gpu < cpu ? ISN_DEVICE_GPU : ISN_DEVICE_CPU;
    double ratio = best == ISN_DEVICE_GPU ? cpu / gpu : gpu / cpu;
    c->decisions++;
    if (c->explore_every && ratio < 4.0 && c->decisions % c->explore_every == 0) {
        best = best == ISN_DEVICE_GPU ? ISN_DEVICE_CPU : ISN_DEVICE_GPU;
        c->explored++;
    }
    c->chosen[best]++;
    pthread_mutex_unlock(c->lock);
    return best;
}

void isn_l2_crossover_learn(isn_l2_crossover *c, isn_device_kind d, double work, double measured_ns) {
    if (!(measured_ns >= 0) || !(work > 0)) return;
    pthread_mutex_lock(c->lock);
    for (int i = 0; i < 5; i++) c->s[d][i] *= c->forgetting;
    add_point(c->s[d], work, measured_ns, 1.0);
    c->measured[d]++;
    refit(c, d);
    pthread_mutex_unlock(c->lock);
}

uint32_t isn_l2_crossover_candidates(isn_l2_crossover *c, uint32_t trees) {
    pthread_mutex_lock(c->lock);
    double da = c->a[ISN_DEVICE_GPU] - c->a[ISN_DEVICE_CPU];
    double db = c->b[ISN_DEVICE_CPU] - c->b[ISN_DEVICE_GPU];
    pthread_mutex_unlock(c->lock);
    if (da <= 0) return db >= 0 ? 1 : UINT32_MAX;
    if (db <= 0) return UINT32_MAX;
    double candidates = ceil(da / db / (double)(trees ? trees : 1));
    return candidates >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)candidates;
}
