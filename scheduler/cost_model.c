/* The cost model: per device, log(service time) as a linear function of query features, learned
 * online by recursive least squares. Log space because times span four orders of magnitude and the
 * error that matters is relative. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "scheduler/scheduler.h"

#define MIN_LOG_NS 4.6  /* 100 ns */
#define MAX_LOG_NS 23.0 /* ~10 s */
#define P_START 10.0    /* prior variance: the fitted start is a guess, let the data move it */
#define P_TRACE_CAP 1e5 /* no forgetting beyond this, so P cannot wind up on repetitive input */

void isn_cost_features(const isn_job_features *f, double x[ISN_COST_FEATURES]) {
    double lt = log1p((double)f->total);
    x[0] = 1.0;
    x[1] = lt;
    x[2] = lt * lt / 16.0; /* curvature: small queries are overhead-bound, large ones posting-bound */
    x[3] = log1p((double)f->shortest);
    x[4] = log1p((double)f->second_shortest);
    x[5] = log1p((double)f->blocks);
    x[6] = (f->num_terms < 32 ? f->num_terms : 32) / 4.0;
    x[7] = log1p((double)f->k);
    x[8] = f->mode == ISN_MODE_AND ? 1.0 : 0.0;
    x[9] = f->algo == ISN_ALGO_OR || f->algo == ISN_ALGO_AND ? 1.0 : 0.0;
    x[10] = f->gpu_resident ? 1.0 : 0.0;
}

/* Fitted on the Debian short-query log (bench/bench_scheduler --fit): a start, not the answer. */
static void start_device(isn_cost_device_model *m, isn_device_kind device) {
    memset(m, 0, sizeof *m);
    if (device == ISN_DEVICE_CPU) {
        m->w[0] = 7.6;  /* ~2 us of fixed cost per query */
        m->w[1] = 0.25;
        m->w[2] = 0.35;
        m->w[9] = 0.5;
    } else {
        m->w[0] = 8.0;  /* ~3 us: a share of a launch plus per-query work */
        m->w[1] = 0.05;
        m->w[2] = 0.12;
        m->w[10] = -0.2;
    }
    for (int i = 0; i < ISN_COST_FEATURES; i++) m->p[i][i] = P_START;
    m->ape_recent = NAN;
}

void isn_cost_model_init(isn_cost_model *model) {
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) start_device(&model->device[d], (isn_device_kind)d);
    model->forgetting = 0.999;
    model->warm_up = 200;
}

static double dot(const double *a, const double *b) {
    double s = 0;
    for (int i = 0; i < ISN_COST_FEATURES; i++) s += a[i] * b[i];
    return s;
}

static double predict_log(const isn_cost_device_model *m, const double *x) {
    double y = dot(m->w, x);
    return y < MIN_LOG_NS ? MIN_LOG_NS : y > MAX_LOG_NS ? MAX_LOG_NS : y;
}

double isn_cost_predict_ns(const isn_cost_model *model, isn_device_kind device, const isn_job_features *features) {
    double x[ISN_COST_FEATURES];
    isn_cost_features(features, x);
    return exp(predict_log(&model->device[device], x));
}

void isn_cost_learn(isn_cost_model *model, isn_device_kind device, const isn_job_features *features,
                    double measured_ns) {
    if (!(measured_ns > 0) || !isfinite(measured_ns)) return;
    isn_cost_device_model *m = &model->device[device];
    double x[ISN_COST_FEATURES], px[ISN_COST_FEATURES];
    isn_cost_features(features, x);
    double predicted = exp(predict_log(m, x));
    double ape = fabs(predicted - measured_ns) / measured_ns;
    if (m->updates >= model->warm_up) {
        m->ape_sum += ape;
        m->ape_count++;
    }
    m->ape_recent = isnan(m->ape_recent) ? ape : 0.99 * m->ape_recent + 0.01 * ape;

    double lambda = model->forgetting > 0 && model->forgetting <= 1 ? model->forgetting : 1.0;
    double trace = 0;
    for (int i = 0; i < ISN_COST_FEATURES; i++) trace += m->p[i][i];
    if (trace > P_TRACE_CAP) lambda = 1.0;
    for (int i = 0; i < ISN_COST_FEATURES; i++) px[i] = dot(m->p[i], x);
    double denom = lambda + dot(x, px);
    if (!(denom > 1e-12)) return;
    double error = log(measured_ns) - dot(m->w, x);
    for (int i = 0; i < ISN_COST_FEATURES; i++) m->w[i] += px[i] / denom * error;
    /* P = (P - (P x)(P x)^T / denom) / lambda; P stays symmetric. */
    for (int i = 0; i < ISN_COST_FEATURES; i++)
        for (int j = 0; j < ISN_COST_FEATURES; j++) m->p[i][j] = (m->p[i][j] - px[i] * px[j] / denom) / lambda;
    m->updates++;
}

double isn_cost_mape(const isn_cost_model *model, isn_device_kind device) {
    const isn_cost_device_model *m = &model->device[device];
    return m->ape_count ? 100.0 * m->ape_sum / (double)m->ape_count : NAN;
}

static const char *const DEVICE_NAMES[ISN_DEVICE_KINDS] = {"cpu", "gpu"};

int isn_cost_model_save(const isn_cost_model *model, const char *path, char *err, size_t err_len) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        snprintf(err, err_len, "cost model state path too long");
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, err_len, "%s: cannot write: %s", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "isn-cost-model 1 features %d\n", ISN_COST_FEATURES);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        const isn_cost_device_model *m = &model->device[d];
        fprintf(f, "device %s updates %llu\nw", DEVICE_NAMES[d], (unsigned long long)m->updates);
        for (int i = 0; i < ISN_COST_FEATURES; i++) fprintf(f, " %.17g", m->w[i]);
        fprintf(f, "\np");
        for (int i = 0; i < ISN_COST_FEATURES; i++)
            for (int j = 0; j < ISN_COST_FEATURES; j++) fprintf(f, " %.17g", m->p[i][j]);
        fprintf(f, "\n");
    }
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, err_len, "%s: cannot write: %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

int isn_cost_model_load(isn_cost_model *model, const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 1;
        snprintf(err, err_len, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    isn_cost_model loaded = *model;
    int version = 0, features = 0;
    const char *problem = NULL;
    if (fscanf(f, "isn-cost-model %d features %d", &version, &features) != 2 || version != 1)
        problem = "not an isn cost model state file (version 1)";
    else if (features != ISN_COST_FEATURES)
        problem = "written for a different number of features";
    for (int d = 0; d < ISN_DEVICE_KINDS && !problem; d++) {
        isn_cost_device_model *m = &loaded.device[d];
        char name[16];
        unsigned long long updates;
        if (fscanf(f, " device %15s updates %llu w", name, &updates) != 2 || strcmp(name, DEVICE_NAMES[d])) {
            problem = "device section missing or out of order";
            break;
        }
        m->updates = updates;
        for (int i = 0; i < ISN_COST_FEATURES && !problem; i++)
            if (fscanf(f, "%lf", &m->w[i]) != 1 || !isfinite(m->w[i])) problem = "bad weight";
        char tag[2];
        if (!problem && fscanf(f, " %1[p]", tag) != 1) problem = "missing covariance";
        for (int i = 0; i < ISN_COST_FEATURES && !problem; i++)
            for (int j = 0; j < ISN_COST_FEATURES && !problem; j++)
                if (fscanf(f, "%lf", &m->p[i][j]) != 1 || !isfinite(m->p[i][j])) problem = "bad covariance";
        m->ape_sum = 0;
        m->ape_count = 0;
        m->ape_recent = NAN;
    }
    fclose(f);
    if (problem) {
        snprintf(err, err_len, "%s: %s", path, problem);
        return -1;
    }
    *model = loaded;
    return 0;
}
