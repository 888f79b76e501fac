/* A GPU batch's time split into a fixed part (launch, copies, synchronisation, the top-k pass:
 * what does not grow with the jobs) and a part per job, fitted online by recursive least squares
 * over measured batches: time = fixed + per_job * jobs. Fitted on the job count alone, not on the
 * jobs' own predictions, so that it does not chase the per-job model that learns from it. The
 * fixed part is identifiable only when batch sizes vary; until they do, the start value holds. */
#include <math.h>
#include <string.h>

#include "scheduler/scheduler_internal.h"

#define BATCH_COST_FORGETTING 0.995 /* about the last 200 batches */
#define BATCH_COST_P_CAP 1e6        /* no winding up of P on batches that are all one size */
#define US 1000.0                   /* fitted in microseconds: P stays well scaled */

void isn_batch_cost_init(isn_batch_cost *cost, double fixed_ns, double per_job_ns) {
    memset(cost, 0, sizeof *cost);
    cost->w[0] = fixed_ns / US;
    cost->w[1] = per_job_ns / US;
    /* Prior variances (us^2): the start is a guess good to about its own size. */
    cost->p[0][0] = 1.0 + cost->w[0] * cost->w[0];
    cost->p[1][1] = 1.0 + cost->w[1] * cost->w[1];
}

void isn_batch_cost_learn(isn_batch_cost *cost, uint32_t jobs, double measured_ns) {
    if (!jobs || !(measured_ns > 0) || !isfinite(measured_ns)) return;
    double x[2] = {1.0, (double)jobs}, px[2];
    double lambda = cost->p[0][0] + cost->p[1][1] > BATCH_COST_P_CAP ? 1.0 : BATCH_COST_FORGETTING;
    for (int i = 0; i < 2; i++) px[i] = cost->p[i][0] * x[0] + cost->p[i][1] * x[1];
    double denom = lambda + x[0] * px[0] + x[1] * px[1];
    double error = measured_ns / US - (cost->w[0] + cost->w[1] * x[1]);
    for (int i = 0; i < 2; i++) cost->w[i] += px[i] / denom * error;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) cost->p[i][j] = (cost->p[i][j] - px[i] * px[j] / denom) / lambda;
    /* When every batch has the same size (a saturated device sends only full ones) the split is not
     * identifiable and the fit can drift along time = fixed + per_job * size, to a fixed part larger
     * than a whole batch and a negative part per job. Neither is possible: keep the fit in bounds. */
    if (cost->w[1] < 0) cost->w[1] = 0;
    if (cost->w[0] > measured_ns / US) cost->w[0] = measured_ns / US;
    if (cost->w[0] < 0) cost->w[0] = 0;
    cost->batches++;
}

double isn_batch_cost_fixed_ns(const isn_batch_cost *cost) { return cost->w[0] > 0 ? cost->w[0] * US : 0.0; }

double isn_batch_cost_per_job_ns(const isn_batch_cost *cost) { return cost->w[1] > 0 ? cost->w[1] * US : 0.0; }

isn_gpu_lesson isn_gpu_lesson_of(double took_ns, double fixed_ns, double batch_predicted_ns, double job_predicted_ns,
                                 uint32_t jobs) {
    double jobs_ns = batch_predicted_ns - fixed_ns;
    double share = jobs_ns > 0 ? job_predicted_ns / jobs_ns : 1.0 / (jobs ? jobs : 1);
    double cost = (took_ns - fixed_ns) * share;
    double low = SCHED_SHARE_LOW * job_predicted_ns, high = SCHED_SHARE_HIGH * job_predicted_ns;
    if (job_predicted_ns > 0) cost = cost < low ? low : cost > high ? high : cost;
    return (isn_gpu_lesson){.cost_ns = cost, .wall_ns = took_ns, .predicted_ns = batch_predicted_ns};
}
