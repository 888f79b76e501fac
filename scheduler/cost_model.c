/* The cost model: per device, log(service time) as a linear function of query features, learned
 * online by recursive least squares. Log space because times span four orders of magnitude and the
 * error that matters is relative; a learned bias then moves the prediction from the geometric mean
 * to MAPE's optimum, and a memo of recently measured queries answers repeats. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "scheduler/scheduler_internal.h"

#define MIN_LOG_NS 4.6  /* 100 ns */
#define MAX_LOG_NS 23.0 /* ~10 s */
#define P_START 1.0     /* prior variance: the fitted start is close; let the data move it */
#define P_TRACE_CAP 1e5 /* no forgetting beyond this, so P cannot wind up on repetitive input */
#define HINGE_POSTINGS 5e4
/* Walking a list costs at least its decode and one score per posting: a floor under the CPU
 * prediction, so a query far larger than anything the weights were fitted on is never predicted
 * cheap (the fitted weights trade off against each other within their data, not beyond it). */
#define CPU_FLOOR_NS_PER_POSTING 0.5
#define KEY_BIAS_CAP 3.0 /* a key's correction stays within a factor of e^3 */
/* The biases move by BIAS_STEP times the prediction's ratio to the time (capped), down when it was
 * over and up when under: at rest the 1/time-weighted median of the errors is 0, which is what
 * minimises the mean absolute percentage error. */
#define BIAS_STEP 0.01
#define BIAS_RATIO_CAP 4.0
#define BIAS_CAP 1.0
#define MEMO_RATE 0.5 /* a remembered query's log time moves this far towards each new one */

static double lg(uint64_t v) { return log1p((double)v); }

void isn_cost_features(const isn_job_features *f, double x[ISN_COST_FEATURES]) {
    double le = lg(f->essential);
    uint32_t terms = f->num_terms < 32 ? f->num_terms : 32;
    uint32_t nonessential = f->nonessential_lists < terms ? f->nonessential_lists : terms;
    x[0] = 1.0;
    x[1] = le;
    /* Hinges: below the knee a query is overhead-bound, above it posting-bound (a + b * postings in
     * log space); monotone, so large queries never extrapolate cheaper. */
    x[2] = log1p((double)f->essential / HINGE_POSTINGS);
    x[3] = lg(f->total - (f->essential < f->total ? f->essential : f->total)); /* only probed */
    x[4] = nonessential / 4.0;
    x[5] = (terms - nonessential) / 4.0;
    x[6] = lg(f->total);
    x[7] = lg(f->shortest);
    x[8] = lg(f->longest);
    x[9] = lg(f->blocks);
    x[10] = terms / 4.0;
    x[11] = lg(f->k);
    x[12] = f->mode == ISN_MODE_AND ? 1.0 : 0.0;
    x[13] = f->algo == ISN_ALGO_OR || f->algo == ISN_ALGO_AND ? 1.0 : 0.0;
    x[14] = f->gpu_resident ? 1.0 : 0.0;
    x[15] = log1p((double)f->total / HINGE_POSTINGS);
    x[16] = lg(f->expected_postings);
    /* The probed threshold (a real k-th score): how high the bar is from the start, which sets how
     * soon the lists left essential above stop proposing candidates. */
    bool probed = f->threshold_probe > 0.0;
    x[17] = probed ? 1.0 : 0.0;
    x[18] = probed ? log(f->threshold_probe) : 0.0;
    /* What the probe says about the work (see isn_job_features). Seeded, MaxScore's essential lists
     * are those left at the probe, and a small rise of the threshold (slack) drops the lowest one;
     * candidates come only from essential blocks that can pass the bar. Unprobed queries take the
     * values of a bar at 0: every list essential, every block a candidate. */
    double slack = probed && f->probe_slack < 1.0 ? f->probe_slack : 1.0;
    x[19] = slack;
    x[20] = log(slack + 0.01);
    for (int s = 0; s < 3; s++) {
        x[21 + 2 * s] = probed ? lg(f->probe_candidate_blocks[s]) : lg(f->blocks);
        x[22 + 2 * s] = probed ? lg(f->probe_essential[s]) : lg(f->total);
    }
    x[27] = probed ? lg(f->probe_walk_postings) : lg(f->total);
    /* Block-Max WAND (AUTO's choice for one term) skips blocks rather than lists: its own level and
     * slope on the candidate blocks, learned online (the Debian logs hold no one-term query). */
    bool block_max = f->algo_resolved == ISN_ALGO_BMW || f->algo_resolved == ISN_ALGO_WAND;
    x[28] = block_max ? 1.0 : 0.0;
    x[29] = block_max ? x[21] : 0.0;
}

/* CPU: least squares in log space over the Debian short-query log (1,279 queries, top-10, auto,
 * each search seeded with its threshold probe as isnd's workers run them; a query's time is the
 * median of three thread-CPU timings after a pass that maps the index), produced by
 * `build/bench/bench_scheduler --fit build/bench/idx-deb /work/data/deb/short.queries.tsv ...`,
 * which also prints the bias that minimises that formula's MAPE on it (CPU_START_BIAS).
 * k, AND, exhaustive, GPU residency and Block-Max WAND (AUTO picks it for one-term queries, which
 * that log lacks) were constant there and start at 0 (online learning sets them). The probe carries
 * the fit: its k-th score (x[17], x[18]), the essential lists it leaves (x[1..5]) and its work
 * features (x[19..27]: slack, candidate blocks, and the postings an unseeded run walks, x[27]).
 * The fitted formula's MAPE is ~16% on both Debian logs (debpkg held out); learning online, ~16.5%
 * seeded and ~17% unseeded (noise floor between two replays 5-8%). With the probe's k-th score alone
 * it was ~20% (~19.5% learning online); with block maxima alone, ~33% (~28%).
 * The per-term corrections and the per-query memo learn the rest (bench_scheduler reports each).
 * GPU: a stand-in until isn_cost_model_seed is given the device's latency model. */
static const double CPU_START[ISN_COST_FEATURES] = {
    5.2501, 0.4335, 0.1250, 0.0081, -0.3419, 0.3270, 0.1113, 0.0326, -0.1106, 0.0456,
    0.0601, 0.0000, 0.0000, 0.0000, 0.0000, 0.0359, 0.0230, 0.2904, 0.1524, 0.2863,
    0.0242, 0.2374, -0.0969, 0.0587, 0.0237, 0.0758, -0.0072, -0.0046, 0.0000, 0.0000};
#define CPU_START_BIAS -0.015

static void start_device(isn_cost_device_model *m, isn_device_kind device) {
    memset(m, 0, sizeof *m);
    if (device == ISN_DEVICE_CPU) {
        memcpy(m->w, CPU_START, sizeof m->w);
        m->bias = CPU_START_BIAS;
    } else {
        m->w[0] = 7.6; /* ~2 us per query */
        m->w[6] = 0.1;
    }
    for (int i = 0; i < ISN_COST_FEATURES; i++) m->p[i][i] = P_START;
    m->ape_recent = NAN;
}

void isn_cost_model_init(isn_cost_model *model) {
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) start_device(&model->device[d], (isn_device_kind)d);
    model->forgetting = 0.999;
    model->key_rate = 0.2;
    model->warm_up = 200;
}

static double dot(const double *a, const double *b) {
    double s = 0;
    for (int i = 0; i < ISN_COST_FEATURES; i++) s += a[i] * b[i];
    return s;
}

static uint32_t key_slot(uint32_t key) { return (uint32_t)((key * 2654435761u) >> 20) & (ISN_COST_KEY_SLOTS - 1); }

static double key_correction(const isn_cost_device_model *m, const isn_job_features *f) {
    if (!f->num_keys) return 0.0;
    double sum = 0.0;
    uint32_t n = f->num_keys < ISN_JOB_KEYS ? f->num_keys : ISN_JOB_KEYS;
    for (uint32_t i = 0; i < n; i++) sum += m->key_bias[key_slot(f->keys[i])];
    return sum / n;
}

static double clamp_log(double y) { return y < MIN_LOG_NS ? MIN_LOG_NS : y > MAX_LOG_NS ? MAX_LOG_NS : y; }

static uint32_t memo_slot(uint64_t signature) { return (uint32_t)(signature >> 40) & (ISN_COST_MEMO_SLOTS - 1); }

static bool memo_hit(const isn_cost_device_model *m, const isn_job_features *f) {
    return f->signature && m->memo_signature[memo_slot(f->signature)] == f->signature;
}

static double ns_of_log(isn_device_kind device, const isn_job_features *features, double log_ns) {
    double ns = exp(clamp_log(log_ns));
    double floor_ns = device == ISN_DEVICE_CPU ? CPU_FLOOR_NS_PER_POSTING * (double)features->essential : 0.0;
    return ns > floor_ns ? ns : floor_ns;
}

static double predict_from(const isn_cost_device_model *m, isn_device_kind device, const isn_job_features *features,
                           double model_log) {
    if (memo_hit(m, features))
        return ns_of_log(device, features, m->memo_log_ns[memo_slot(features->signature)] + m->memo_bias);
    return ns_of_log(device, features, model_log + m->bias);
}

/* x: the features' vector, computed on first need (*have_x): a job whose signature the memo holds needs none. */
static double predict_device(const isn_cost_model *model, isn_device_kind device, const isn_job_features *features,
                             double x[ISN_COST_FEATURES], bool *have_x) {
    const isn_cost_device_model *m = &model->device[device];
    if (memo_hit(m, features)) return predict_from(m, device, features, 0.0);
    if (!*have_x) {
        isn_cost_features(features, x);
        *have_x = true;
    }
    return predict_from(m, device, features, clamp_log(dot(m->w, x) + key_correction(m, features)));
}

double isn_cost_predict_ns(const isn_cost_model *model, isn_device_kind device, const isn_job_features *features) {
    double x[ISN_COST_FEATURES];
    bool have_x = false;
    return predict_device(model, device, features, x, &have_x);
}

void isn_cost_predict_all_ns(const isn_cost_model *model, const isn_job_features *features,
                             double predicted_ns[ISN_DEVICE_KINDS]) {
    double x[ISN_COST_FEATURES];
    bool have_x = false;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        predicted_ns[d] = predict_device(model, (isn_device_kind)d, features, x, &have_x);
}

static void step_bias(double *bias, double predicted_ns, double measured_ns) {
    double ratio = predicted_ns / measured_ns;
    if (ratio > BIAS_RATIO_CAP) ratio = BIAS_RATIO_CAP;
    double v = *bias + (predicted_ns > measured_ns ? -BIAS_STEP : BIAS_STEP) * ratio;
    *bias = v > BIAS_CAP ? BIAS_CAP : v < -BIAS_CAP ? -BIAS_CAP : v;
}

void isn_cost_learn(isn_cost_model *model, isn_device_kind device, const isn_job_features *features,
                    double measured_ns) {
    if (!(measured_ns > 0) || !isfinite(measured_ns)) return;
    isn_cost_device_model *m = &model->device[device];
    double x[ISN_COST_FEATURES], px[ISN_COST_FEATURES];
    isn_cost_features(features, x);
    double correction = key_correction(m, features);
    double predicted_log = clamp_log(dot(m->w, x) + correction);
    double predicted_ns = predict_from(m, device, features, predicted_log);
    double ape = fabs(predicted_ns - measured_ns) / measured_ns;
    if (m->updates >= model->warm_up) {
        m->ape_sum += ape;
        m->ape_count++;
    }
    m->ape_recent = isnan(m->ape_recent) ? ape : 0.99 * m->ape_recent + 0.01 * ape;

    double measured_log = log(measured_ns);
    if (features->signature) {
        uint32_t slot = memo_slot(features->signature);
        if (m->memo_signature[slot] == features->signature) {
            step_bias(&m->memo_bias, predicted_ns, measured_ns);
            m->memo_log_ns[slot] += (float)(MEMO_RATE * (clamp_log(measured_log) - m->memo_log_ns[slot]));
        } else {
            m->memo_signature[slot] = features->signature;
            m->memo_log_ns[slot] = (float)clamp_log(measured_log);
        }
    }
    /* The weights' bias learns from the weights' prediction whether or not the memo answered. */
    step_bias(&m->bias, ns_of_log(device, features, predicted_log + m->bias), measured_ns);
    /* Each key moves towards what this job's error says about it; the weights learn what the keys
     * do not explain. */
    double key_error = measured_log - predicted_log;
    uint32_t keys = features->num_keys < ISN_JOB_KEYS ? features->num_keys : ISN_JOB_KEYS;
    for (uint32_t i = 0; i < keys && model->key_rate > 0; i++) {
        float *bias = &m->key_bias[key_slot(features->keys[i])];
        double v = *bias + model->key_rate * key_error;
        *bias = (float)(v > KEY_BIAS_CAP ? KEY_BIAS_CAP : v < -KEY_BIAS_CAP ? -KEY_BIAS_CAP : v);
    }

    double lambda = model->forgetting > 0 && model->forgetting <= 1 ? model->forgetting : 1.0;
    double trace = 0;
    for (int i = 0; i < ISN_COST_FEATURES; i++) trace += m->p[i][i];
    if (trace > P_TRACE_CAP) lambda = 1.0;
    for (int i = 0; i < ISN_COST_FEATURES; i++) px[i] = dot(m->p[i], x);
    double denom = lambda + dot(x, px);
    if (!(denom > 1e-12)) return;
    double error = measured_log - correction - dot(m->w, x);
    for (int i = 0; i < ISN_COST_FEATURES; i++) m->w[i] += px[i] / denom * error;
    /* P = (P - (P x)(P x)^T / denom) / lambda; P stays symmetric. */
    for (int i = 0; i < ISN_COST_FEATURES; i++)
        for (int j = 0; j < ISN_COST_FEATURES; j++) m->p[i][j] = (m->p[i][j] - px[i] * px[j] / denom) / lambda;
    m->updates++;
}

/* Synthetic queries for seeding: one to four lists of 10 to 10 million postings. */
static isn_job_features synthetic_query(uint64_t *state) {
    isn_job_features f = {.k = 10, .mode = ISN_MODE_OR, .algo = ISN_ALGO_AUTO};
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    f.num_terms = 1 + (uint32_t)((*state >> 60) % 4);
    for (uint32_t i = 0; i < f.num_terms; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t df = (uint64_t)exp(2.3 + (double)(*state >> 11) / 9007199254740992.0 * 13.8);
        f.total += df;
        f.blocks += (df + 127) / 128;
        if (!f.shortest || df < f.shortest) f.shortest = df;
        if (df > f.longest) f.longest = df;
    }
    f.essential = f.expected_postings = f.total;
    return f;
}

void isn_cost_model_seed(isn_cost_model *model, isn_device_kind device,
                         double (*ns_of)(const isn_job_features *features, const void *arg), const void *arg) {
    isn_cost_device_model *m = &model->device[device];
    memset(m, 0, sizeof *m);
    double a[ISN_COST_FEATURES][ISN_COST_FEATURES] = {{0}}, b[ISN_COST_FEATURES] = {0}, x[ISN_COST_FEATURES];
    uint64_t state = 0x2545f4914f6cdd1dull;
    for (int s = 0; s < 4000; s++) {
        isn_job_features f = synthetic_query(&state);
        double ns = ns_of(&f, arg);
        if (!(ns > 0)) continue;
        isn_cost_features(&f, x);
        for (int i = 0; i < ISN_COST_FEATURES; i++) {
            b[i] += x[i] * log(ns);
            for (int j = 0; j < ISN_COST_FEATURES; j++) a[i][j] += x[i] * x[j];
        }
    }
    isn_least_squares_solve(a, b, m->w);
    for (int i = 0; i < ISN_COST_FEATURES; i++) m->p[i][i] = P_START;
    m->ape_recent = NAN;
}

double isn_cost_mape(const isn_cost_model *model, isn_device_kind device) {
    const isn_cost_device_model *m = &model->device[device];
    return m->ape_count ? 100.0 * m->ape_sum / (double)m->ape_count : NAN;
}

void isn_least_squares_solve(double a[ISN_COST_FEATURES][ISN_COST_FEATURES], const double b[ISN_COST_FEATURES],
                             double w[ISN_COST_FEATURES]) {
    /* A little ridge, so features a data set never varies (AND mode, say) stay at 0. */
    double m[ISN_COST_FEATURES][ISN_COST_FEATURES + 1];
    for (int i = 0; i < ISN_COST_FEATURES; i++) {
        for (int j = 0; j < ISN_COST_FEATURES; j++) m[i][j] = a[i][j] + (i == j ? 1e-6 * (1.0 + a[i][i]) : 0.0);
        m[i][ISN_COST_FEATURES] = b[i];
    }
    for (int c = 0; c < ISN_COST_FEATURES; c++) {
        int pivot = c;
        for (int r = c + 1; r < ISN_COST_FEATURES; r++)
            if (fabs(m[r][c]) > fabs(m[pivot][c])) pivot = r;
        for (int j = 0; j <= ISN_COST_FEATURES; j++) {
            double t = m[c][j];
            m[c][j] = m[pivot][j];
            m[pivot][j] = t;
        }
        if (fabs(m[c][c]) < 1e-300) continue;
        for (int r = 0; r < ISN_COST_FEATURES; r++) {
            if (r == c) continue;
            double factor = m[r][c] / m[c][c];
            for (int j = c; j <= ISN_COST_FEATURES; j++) m[r][j] -= factor * m[c][j];
        }
    }
    for (int i = 0; i < ISN_COST_FEATURES; i++) w[i] = fabs(m[i][i]) < 1e-300 ? 0.0 : m[i][ISN_COST_FEATURES] / m[i][i];
}

/* 4: the threshold probe's work features and the resolved algorithm (30 features; 3 had 17, then
 * 19). 3: a bias per device, the per-query memo and the expected-postings feature. The header also
 * names the number of features, so a file of another feature count is refused as written by another
 * version. */
#define STATE_VERSION 4
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
    fprintf(f, "isn-cost-model %d features %d keys %d memo %d\n", STATE_VERSION, ISN_COST_FEATURES, ISN_COST_KEY_SLOTS,
            ISN_COST_MEMO_SLOTS);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        const isn_cost_device_model *m = &model->device[d];
        fprintf(f, "device %s updates %llu bias %.17g %.17g\nw", DEVICE_NAMES[d], (unsigned long long)m->updates,
                m->bias, m->memo_bias);
        for (int i = 0; i < ISN_COST_FEATURES; i++) fprintf(f, " %.17g", m->w[i]);
        fprintf(f, "\np");
        for (int i = 0; i < ISN_COST_FEATURES; i++)
            for (int j = 0; j < ISN_COST_FEATURES; j++) fprintf(f, " %.17g", m->p[i][j]);
        uint32_t used = 0;
        for (int i = 0; i < ISN_COST_KEY_SLOTS; i++) used += m->key_bias[i] != 0.0f;
        fprintf(f, "\nkeys %u", used);
        for (int i = 0; i < ISN_COST_KEY_SLOTS; i++)
            if (m->key_bias[i] != 0.0f) fprintf(f, " %d %.9g", i, (double)m->key_bias[i]);
        used = 0;
        for (int i = 0; i < ISN_COST_MEMO_SLOTS; i++) used += m->memo_signature[i] != 0;
        fprintf(f, "\nmemo %u", used);
        for (int i = 0; i < ISN_COST_MEMO_SLOTS; i++)
            if (m->memo_signature[i])
                fprintf(f, " %d %llu %.9g", i, (unsigned long long)m->memo_signature[i], (double)m->memo_log_ns[i]);
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
    FILE *f = isn_fopen_regular(path, "r");
    if (!f) {
        if (errno == ENOENT) return 1;
        snprintf(err, err_len, "%s: cannot read: %s", path, isn_open_regular_strerror(errno));
        return -1;
    }
    isn_cost_model loaded = *model;
    int version = 0, features = 0, slots = 0, memo_slots = 0;
    const char *problem = NULL;
    if (fscanf(f, "isn-cost-model %d features %d", &version, &features) != 2 || version < 1)
        problem = "not an isn cost model state file";
    else if (version != STATE_VERSION || features != ISN_COST_FEATURES ||
             fscanf(f, " keys %d memo %d", &slots, &memo_slots) != 2 || slots != ISN_COST_KEY_SLOTS ||
             memo_slots != ISN_COST_MEMO_SLOTS)
        problem = "written by another version of the cost model (its features differ); delete it to start afresh";
    for (int d = 0; d < ISN_DEVICE_KINDS && !problem; d++) {
        isn_cost_device_model *m = &loaded.device[d];
        char name[16];
        unsigned long long updates;
        if (fscanf(f, " device %15s updates %llu bias %lf %lf w", name, &updates, &m->bias, &m->memo_bias) != 4 ||
            strcmp(name, DEVICE_NAMES[d])) {
            problem = "device section missing or out of order";
            break;
        }
        if (!isfinite(m->bias) || fabs(m->bias) > BIAS_CAP || !isfinite(m->memo_bias) || fabs(m->memo_bias) > BIAS_CAP) {
            problem = "bad bias";
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
        unsigned used = 0;
        memset(m->key_bias, 0, sizeof m->key_bias);
        if (!problem && (fscanf(f, " keys %u", &used) != 1 || used > ISN_COST_KEY_SLOTS)) problem = "bad key count";
        for (unsigned i = 0; i < used && !problem; i++) {
            int slot;
            float bias;
            if (fscanf(f, "%d %f", &slot, &bias) != 2 || slot < 0 || slot >= ISN_COST_KEY_SLOTS || !isfinite(bias) ||
                fabsf(bias) > KEY_BIAS_CAP)
                problem = "bad key correction";
            else m->key_bias[slot] = bias;
        }
        memset(m->memo_signature, 0, sizeof m->memo_signature);
        if (!problem && (fscanf(f, " memo %u", &used) != 1 || used > ISN_COST_MEMO_SLOTS)) problem = "bad memo count";
        for (unsigned i = 0; i < used && !problem; i++) {
            int slot;
            unsigned long long signature;
            float log_ns;
            if (fscanf(f, "%d %llu %f", &slot, &signature, &log_ns) != 3 || slot < 0 || slot >= ISN_COST_MEMO_SLOTS ||
                !signature || memo_slot(signature) != (uint32_t)slot || !(log_ns >= MIN_LOG_NS && log_ns <= MAX_LOG_NS))
                problem = "bad memo entry";
            else {
                m->memo_signature[slot] = signature;
                m->memo_log_ns[slot] = log_ns;
            }
        }
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
