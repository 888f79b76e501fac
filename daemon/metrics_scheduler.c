/* The search service's metrics: the scheduler's (queues, routing, steals, shedding, batches, cost
 * model) and the GPU's (first-stage health, second-stage crossover), as Prometheus text or JSON
 * members; metrics_render.c places them in /metrics and /stats. */
#include "daemon/metrics_scheduler.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const QUEUE_NAMES[ISN_QUEUES] = {"cpu", "gpu", "undecided"};
static const char *const DEVICE_NAMES[ISN_DEVICE_KINDS] = {"cpu", "gpu"};
static const char *const DISPATCHER_PHASE_NAMES[ISN_DISPATCHER_PHASES] = {"forming", "launching", "landing",
                                                                          "answering", "sleeping"};

static void render_prometheus(const isn_scheduler_stats *st, byte_buffer *out) {
    /* The families with one value each; those with labels follow. */
    const struct {
        const char *name, *type, *help;
        uint64_t value;
    } single_values[] = {
        {"isn_scheduler_deque_depth", "gauge", "Jobs held in the CPU workers' own deques.", st->deque_depth},
        {"isn_scheduler_degraded_total", "counter", "Jobs admitted degraded under overload (earlier stop).", st->degraded},
        {"isn_scheduler_dropped_dead_total", "counter", "Jobs past their deadline when dequeued: not run.", st->dropped_dead},
        {"isn_scheduler_partial_total", "counter", "Jobs that stopped early with their best hits (complete=false).", st->partial},
        {"isn_scheduler_batch_jobs_total", "counter", "Jobs sent in GPU batches (mean batch size = this / batches).", st->batch_jobs},
        {"isn_scheduler_gpu_failures_total", "counter", "GPU batches that failed (their jobs re-ran on the CPU).", st->gpu_failures},
        {"isn_scheduler_gpu_reruns_total", "counter", "Jobs re-run on the CPU after a GPU failure.", st->gpu_reruns},
        {"isn_scheduler_gpu_answers_helped_total", "counter", "GPU answers completed (packed) by an idle worker beside the dispatcher of their batch.", st->gpu_answers_helped},
        {"isn_scheduler_spare_workers", "gauge", "Workers that take work only while enough event loops are idle (search.spare_workers).", st->spare_workers},
        {"isn_scheduler_spare_workers_resting", "gauge", "Of the spare workers, those resting now: too few loops were idle when they last looked.", st->spares_resting},
        {"isn_scheduler_standby_workers", "gauge", "Workers that take work only while no GPU holds the index (a node sized beside a GPU that does not serve).", st->standby_workers},
        {"isn_scheduler_standby_workers_resting", "gauge", "Of the standby workers, those resting now: a GPU holds the index.", st->standby_resting},
        {"isn_scheduler_spare_rests_total", "counter", "Times a spare worker found too few idle loops and stopped taking work.", st->spare_rests},
        {"isn_scheduler_prepare_queue_depth", "gauge", "Requests waiting for a worker to analyse them.", st->prepare_depth},
        {"isn_scheduler_prepared_total", "counter", "Requests a worker analysed and passed to admission.", st->prepared},
        {"isn_scheduler_refused_at_analysis_total", "counter", "Requests refused while a worker analysed them (invalid query, too many terms, out of memory).", st->refused_prepare},
        {"isn_scheduler_shed_unprepared_total", "counter", "Of the overload sheds: requests refused from the preparation queue without analysis (past their admission point, or waiting past CoDel's target in a standing backlog).", st->shed_unprepared},
        {"isn_scheduler_shed_arrival_codel_total", "counter", "Of the overload sheds: requests refused on arrival because, in a standing preparation backlog, the preparations ahead would have held them past CoDel's target.", st->shed_arrival_codel},
        {"isn_scheduler_shed_arrival_late_total", "counter", "Of the overload sheds: requests refused on arrival because they were already past their admission point (they waited unread, or in a stall of the loop).", st->shed_arrival_late},
        {"isn_scheduler_shed_arrival_preparing_total", "counter", "Of the overload sheds: requests refused on arrival because the preparations queued ahead alone would have held them past their admission point.", st->shed_arrival_preparing},
        {"isn_scheduler_shed_arrival_wait_total", "counter", "Of the overload sheds: requests refused on arrival because no device's predicted wait let a typical job finish by their admission point.", st->shed_arrival_wait},
        {"isn_scheduler_shed_routed_total", "counter", "Of the overload sheds: requests refused by routing once prepared (no device could finish them by their admission point).", st->shed_routed},
        {"isn_scheduler_stalls_seen_total", "counter", "Stalls the loops saw: a loop's poll blocked over 15 ms past its timeout, or a loop keeping up with its sockets read a request held unread that long (the node, or that loop, had stopped); the preparation queue's stillness counts from the latest one's end.", st->stalls_seen},
        {"isn_scheduler_shed_unprepared_late_total", "counter", "Of the requests refused unprepared: those past their admission point (the rest waited past CoDel's target).", st->shed_unprepared_late},
        {"isn_scheduler_prepare_waits_total", "counter", "Requests taken from the preparation queue (the count of the two wait sums).", st->prepare_waits},
        {"isn_scheduler_prepare_backlog_standing", "gauge", "1 while the preparation queue holds a standing backlog (CoDel: an interval's least wait above the target).", st->prepare_backlog_standing},
    };
    for (size_t i = 0; i < sizeof single_values / sizeof single_values[0]; i++)
        prom_u64(out, single_values[i].name, single_values[i].type, single_values[i].help, single_values[i].value);
    /* seconds: sums over requests, each a counter of its own, and what admission believes now */
    const struct {
        const char *name, *type, *help;
        double value;
    } seconds[] = {
        {"isn_scheduler_arrival_refused_predicted_seconds_total", "counter", "Summed over the requests refused on arrival for the devices' predicted wait: the sooner device's predicted finish.", st->arrival_refused_done_seconds_sum},
        {"isn_scheduler_arrival_refused_bound_seconds_total", "counter", "Summed over the same refusals: the finish each had to meet (what was left of its admission budget).", st->arrival_refused_bound_seconds_sum},
        {"isn_scheduler_arrival_wait_seconds_total", "counter", "Summed over the requests taken from the preparation queue: time from arrival (the loop's arrival floor) to that queue.", st->arrival_wait_seconds_sum},
        {"isn_scheduler_prepare_wait_seconds_total", "counter", "Summed over the requests taken from the preparation queue: time they waited in it.", st->prepare_wait_seconds_sum},
        {"isn_scheduler_prepare_predicted_wait_seconds", "gauge", "The wait a request queued now is predicted to have before a worker takes it to prepare (what the arrival check compares with its admission point; 0 with nothing waiting).", st->prepare_predicted_wait_seconds},
        {"isn_scheduler_prepare_still_seconds", "gauge", "How long the preparation queue has gone without moving (nothing taken from it, nothing let into it empty) while requests wait in it.", st->prepare_still_seconds},
        {"isn_scheduler_prepare_departure_seconds", "gauge", "The preparation queue's measured time between departures while it held a backlog (0: not measured yet).", st->prepare_departure_seconds},
    };
    for (size_t i = 0; i < sizeof seconds / sizeof seconds[0]; i++) {
        prom_family(out, seconds[i].name, seconds[i].type, seconds[i].help);
        buffer_printf(out, "%s %.9g\n", seconds[i].name, seconds[i].value);
    }
    prom_family(out, "isn_scheduler_queue_depth", "gauge", "Jobs waiting in each scheduler queue (EDF ordered).");
    for (int q = 0; q < ISN_QUEUES; q++)
        buffer_printf(out, "isn_scheduler_queue_depth{queue=\"%s\"} %u\n", QUEUE_NAMES[q], st->queue_depth[q]);
    prom_family(out, "isn_scheduler_routed_total", "counter", "Routing decisions: the queue each admitted job went to.");
    for (int q = 0; q < ISN_QUEUES; q++)
        buffer_printf(out, "isn_scheduler_routed_total{queue=\"%s\"} %llu\n", QUEUE_NAMES[q],
                      (unsigned long long)st->routed[q]);
    prom_family(out, "isn_scheduler_ran_total", "counter", "Jobs run, by device.");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        buffer_printf(out, "isn_scheduler_ran_total{device=\"%s\"} %llu\n", DEVICE_NAMES[d],
                      (unsigned long long)st->ran_on[d]);
    prom_family(out, "isn_scheduler_wait_seconds_total", "counter", "Time jobs waited from admission to start, by device.");
    prom_family(out, "isn_scheduler_waits_total", "counter", "Jobs counted in isn_scheduler_wait_seconds_total.");
    prom_family(out, "isn_scheduler_busy_seconds_total", "counter",
                "Time spent running jobs, summed over CPU workers or GPU devices (utilisation = rate / units).");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        buffer_printf(out, "isn_scheduler_wait_seconds_total{device=\"%s\"} %.9g\n", DEVICE_NAMES[d],
                      st->wait_seconds_sum[d]);
        buffer_printf(out, "isn_scheduler_waits_total{device=\"%s\"} %llu\n", DEVICE_NAMES[d],
                      (unsigned long long)st->wait_count[d]);
        buffer_printf(out, "isn_scheduler_busy_seconds_total{device=\"%s\"} %.9g\n", DEVICE_NAMES[d],
                      st->busy_seconds[d]);
    }
    prom_family(out, "isn_scheduler_gpu_dispatcher_seconds_total", "counter",
                "GPU dispatchers' time by phase, summed over them: forming batches (the scheduler's lock held or "
                "awaited), launching them (the device's submit), landing them (the device's complete: its wait and "
                "the answers copied out), answering (their share of completing the answers), sleeping. Little "
                "sleeping means the dispatcher, not the device, bounds the GPU's rate.");
    for (int p = 0; p < ISN_DISPATCHER_PHASES; p++)
        buffer_printf(out, "isn_scheduler_gpu_dispatcher_seconds_total{phase=\"%s\"} %.9g\n", DISPATCHER_PHASE_NAMES[p],
                      st->dispatcher_seconds[p]);
    prom_family(out, "isn_scheduler_utilisation", "gauge", "Busy share of each device kind since start (0..1).");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        uint32_t units = d == ISN_DEVICE_CPU ? st->workers : st->gpus;
        double u = units && st->uptime_seconds > 0 ? st->busy_seconds[d] / (units * st->uptime_seconds) : 0;
        buffer_printf(out, "isn_scheduler_utilisation{device=\"%s\"} %.6f\n", DEVICE_NAMES[d], u);
    }
    prom_family(out, "isn_scheduler_steals_total", "counter",
                "Work taken across: from another worker's deque, GPU-preferred jobs run by the CPU, undecided jobs "
                "taken by each side.");
    buffer_printf(out,
                  "isn_scheduler_steals_total{kind=\"deque\"} %llu\nisn_scheduler_steals_total{kind=\"gpu_to_cpu\"} "
                  "%llu\nisn_scheduler_steals_total{kind=\"undecided_cpu\"} %llu\n"
                  "isn_scheduler_steals_total{kind=\"undecided_gpu\"} %llu\n",
                  (unsigned long long)st->stolen_deque, (unsigned long long)st->stolen_gpu,
                  (unsigned long long)st->undecided_cpu, (unsigned long long)st->undecided_gpu);
    prom_family(out, "isn_scheduler_shed_total", "counter",
                "Jobs refused at admission: a full queue, or no device able to finish before the deadline.");
    buffer_printf(out, "isn_scheduler_shed_total{reason=\"queue_full\"} %llu\nisn_scheduler_shed_total{reason=\"overload\"} %llu\n",
                  (unsigned long long)st->shed_full, (unsigned long long)st->shed_overload);
    prom_family(out, "isn_scheduler_batches_total", "counter", "GPU batches sent, by why they were sent.");
    for (int r = 0; r < ISN_FLUSH_REASONS; r++)
        buffer_printf(out, "isn_scheduler_batches_total{reason=\"%s\"} %llu\n", isn_flush_reason_name(r),
                      (unsigned long long)st->batch_flush[r]);
    prom_family(out, "isn_scheduler_measured_job_seconds", "gauge",
                "Measured device time per job lately (busy time over jobs finished); admission caps the model's waits by it.");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        buffer_printf(out, "isn_scheduler_measured_job_seconds{device=\"%s\"} %.9g\n", DEVICE_NAMES[d],
                      st->measured_job_seconds[d]);
    prom_family(out, "isn_scheduler_service_scale", "gauge",
                "Measured over predicted service time lately, by device; admission scales its estimates by it.");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        buffer_printf(out, "isn_scheduler_service_scale{device=\"%s\"} %.3f\n", DEVICE_NAMES[d], st->service_scale[d]);
    prom_family(out, "isn_scheduler_gpu_batch_fixed_seconds", "gauge",
                "Learned fixed part of a GPU batch's time (launch, copies, synchronisation), paid once per batch.");
    buffer_printf(out, "isn_scheduler_gpu_batch_fixed_seconds %.9f\n", st->batch_fixed_seconds);
    prom_family(out, "isn_scheduler_gpu_batch_mape_percent", "gauge",
                "Mean absolute percentage error of GPU batch times as predicted (fixed part + jobs), NaN before any.");
    if (isnan(st->batch_mape)) buffer_printf(out, "isn_scheduler_gpu_batch_mape_percent NaN\n");
    else buffer_printf(out, "isn_scheduler_gpu_batch_mape_percent %.3f\n", st->batch_mape);
    prom_family(out, "isn_scheduler_gpu_batch_per_job_seconds", "gauge", "Learned part of a GPU batch's time per job.");
    buffer_printf(out, "isn_scheduler_gpu_batch_per_job_seconds %.9f\n", st->batch_per_job_seconds);
    prom_family(out, "isn_cost_model_mape_percent", "gauge",
                "Cost model mean absolute percentage error since warm-up, by device (NaN before any).");
    prom_family(out, "isn_cost_model_updates_total", "counter", "Measured times the cost model learned from, by device.");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        if (isnan(st->mape[d])) buffer_printf(out, "isn_cost_model_mape_percent{device=\"%s\"} NaN\n", DEVICE_NAMES[d]);
        else buffer_printf(out, "isn_cost_model_mape_percent{device=\"%s\"} %.3f\n", DEVICE_NAMES[d], st->mape[d]);
        buffer_printf(out, "isn_cost_model_updates_total{device=\"%s\"} %llu\n", DEVICE_NAMES[d],
                      (unsigned long long)st->model_updates[d]);
    }
}

static void render_json(const search_service_view *view, const isn_scheduler_stats *st, byte_buffer *out) {
    buffer_printf(out,
                  "\"scheduler\":{\"queues\":{\"cpu\":%u,\"gpu\":%u,\"undecided\":%u,\"deques\":%u},"
                  "\"routed\":{\"cpu\":%llu,\"gpu\":%llu,\"undecided\":%llu},\"ran\":{\"cpu\":%llu,\"gpu\":%llu},"
                  "\"shed_queue_full\":%llu,\"shed_overload\":%llu,\"degraded\":%llu,\"dropped_dead\":%llu,"
                  "\"partial\":%llu,\"steals\":{\"deque\":%llu,\"gpu_to_cpu\":%llu,\"undecided_cpu\":%llu,"
                  "\"undecided_gpu\":%llu},\"batches\":%llu,\"batch_jobs\":%llu,\"gpu_failures\":%llu,",
                  st->queue_depth[0], st->queue_depth[1], st->queue_depth[2], st->deque_depth,
                  (unsigned long long)st->routed[0], (unsigned long long)st->routed[1],
                  (unsigned long long)st->routed[2], (unsigned long long)st->ran_on[0],
                  (unsigned long long)st->ran_on[1], (unsigned long long)st->shed_full,
                  (unsigned long long)st->shed_overload, (unsigned long long)st->degraded,
                  (unsigned long long)st->dropped_dead, (unsigned long long)st->partial,
                  (unsigned long long)st->stolen_deque, (unsigned long long)st->stolen_gpu,
                  (unsigned long long)st->undecided_cpu, (unsigned long long)st->undecided_gpu,
                  (unsigned long long)st->batches, (unsigned long long)st->batch_jobs,
                  (unsigned long long)st->gpu_failures);
    buffer_printf(out, "\"simulated_gpus\":%u,\"gpus\":%u,\"service_scale\":{\"cpu\":%.3f,\"gpu\":%.3f},",
                  view->simulated_gpus, st->gpus,
                  st->service_scale[0], st->service_scale[1]);
    buffer_printf(out, "\"prepare\":{\"queued\":%u,\"prepared\":%llu,\"refused\":%llu},", st->prepare_depth,
                  (unsigned long long)st->prepared, (unsigned long long)st->refused_prepare);
    buffer_printf(out, "\"gpu_batch_us\":{\"fixed\":%.1f,\"per_job\":%.2f},", st->batch_fixed_seconds * 1e6,
                  st->batch_per_job_seconds * 1e6);
    if (isnan(st->batch_mape)) buffer_printf(out, "\"gpu_batch_mape_percent\":null,");
    else buffer_printf(out, "\"gpu_batch_mape_percent\":%.3f,", st->batch_mape);
    buffer_printf(out, "\"cost_model_mape_percent\":{");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        if (isnan(st->mape[d])) buffer_printf(out, "%s\"%s\":null", d ? "," : "", DEVICE_NAMES[d]);
        else buffer_printf(out, "%s\"%s\":%.3f", d ? "," : "", DEVICE_NAMES[d], st->mape[d]);
    }
    buffer_printf(out, "}}");
}

/* One device's first-stage health as a JSON object. */
static void render_device_json(const isn_gpu_health *hp, byte_buffer *out) {
    const isn_gpu_health h = *hp;
    buffer_printf(out,
                  "{\"device\":\"%s\",\"ready\":%s,\"healthy\":%s,\"reason\":\"%s\",\"warmup_ms\":%.3f,"
                  "\"index_bytes\":%llu,\"bytes_resident\":%llu,\"terms_total\":%u,\"terms_resident\":%u,"
                  "\"terms_prefix\":%u,\"tier_docs\":%u,\"batches\":%llu,\"queries_device\":%llu,\"queries_cpu\":%llu,"
                  "\"queries_not_resident\":%llu,\"queries_prefix\":%llu,\"device_errors\":%llu,"
                  "\"bytes_transferred\":%llu,\"stream_bytes\":%llu,\"queries_streamed\":%llu,\"bytes_streamed\":%llu",
                  h.device_name, h.ready ? "true" : "false", h.healthy ? "true" : "false",
                  h.healthy ? "" : "device error", h.warmup_ms, (unsigned long long)h.index_bytes,
                  (unsigned long long)h.bytes_resident, h.terms_total, h.terms_resident, h.terms_prefix, h.tier_docs,
                  (unsigned long long)h.batches, (unsigned long long)h.queries_device,
                  (unsigned long long)h.queries_cpu, (unsigned long long)h.queries_not_resident,
                  (unsigned long long)h.queries_prefix, (unsigned long long)h.device_errors,
                  (unsigned long long)h.bytes_transferred, (unsigned long long)h.stream_bytes,
                  (unsigned long long)h.queries_streamed, (unsigned long long)h.bytes_streamed);
    /* what the backend learned and where its CPU answers came from */
    buffer_printf(out, ",\"pruning\":{\"batches\":{\"pruned\":%llu,\"exhaustive\":%llu},"
                       "\"cost_samples\":{\"pruned\":%llu,\"exhaustive\":%llu},"
                       "\"ms_per_mposting\":{\"pruned\":%.6f,\"exhaustive\":%.6f}},\"cpu_fallbacks\":{",
                  (unsigned long long)h.batches_pruned, (unsigned long long)h.batches_exhaustive,
                  (unsigned long long)h.samples_pruned, (unsigned long long)h.samples_exhaustive,
                  h.ms_per_mposting_pruned, h.ms_per_mposting_exhaustive);
    for (int r = 0, first = 1; r < ISN_GPU_FALLBACK_REASONS; r++) {
        if (r == ISN_GPU_FALLBACK_EMPTY_QUERY) continue;
        buffer_printf(out, "%s\"%s\":%llu", first ? "" : ",", isn_gpu_fallback_label((isn_gpu_fallback_reason)r),
                      (unsigned long long)h.fallbacks[r]);
        first = 0;
    }
    buffer_printf(out, "}}");
}

static void render_gpu_json(const search_service_view *view, byte_buffer *out) {
    /* first_stage: device 0 (null without a GPU); first_stage_devices: every device */
    buffer_printf(out, ",\"gpu\":{\"first_stage\":");
    uint32_t devices = isn_scheduler_gpu_count(view->scheduler);
    isn_gpu_health h;
    if (devices && isn_scheduler_gpu_health(view->scheduler, 0, &h)) render_device_json(&h, out);
    else buffer_printf(out, "null");
    buffer_printf(out, ",\"first_stage_devices\":[");
    for (uint32_t d = 0; d < devices; d++) {
        if (!isn_scheduler_gpu_health(view->scheduler, d, &h)) continue;
        if (d) buffer_printf(out, ",");
        render_device_json(&h, out);
    }
    buffer_printf(out, "]");
    isn_gpu_rerank_stats x;
    isn_gpu_rerank_stats_get(view->rerank, &x);
    buffer_printf(out,
                  ",\"rerank\":{\"gpu\":%s,\"calls\":{\"cpu\":%llu,\"gpu\":%llu},\"explored\":%llu,"
                  "\"gpu_failures\":%llu}}",
                  view->rerank_on_gpu ? "true" : "false", (unsigned long long)x.cpu_calls,
                  (unsigned long long)x.gpu_calls, (unsigned long long)x.explored, (unsigned long long)x.gpu_failures);
}

static void render_gpu_prometheus(const search_service_view *view, byte_buffer *out) {
    /* Every device's lines come out in the same order, one line per metric: emitted line by line across
     * the devices so that each metric's samples stay together, as the text format requires. */
    char text[ISN_SCHED_MAX_GPUS][4096];
    const char *line[ISN_SCHED_MAX_GPUS];
    uint32_t devices = isn_scheduler_gpu_count(view->scheduler), n = 0;
    for (uint32_t d = 0; d < devices; d++) {
        isn_gpu_health h;
        if (!isn_scheduler_gpu_health(view->scheduler, d, &h)) continue;
        char labels[32];
        snprintf(labels, sizeof labels, "device=\"%u\"", d);
        size_t len = isn_gpu_health_format_metrics(&h, labels, text[n], sizeof text[n]);
        if (len >= sizeof text[n]) text[n][sizeof text[n] - 1] = '\0';
        line[n] = text[n];
        n++;
    }
    while (n && *line[0]) {
        for (uint32_t d = 0; d < n; d++) {
            const char *end = strchr(line[d], '\n');
            size_t len = end ? (size_t)(end - line[d]) + 1 : strlen(line[d]);
            buffer_append(out, line[d], len);
            line[d] += len;
        }
    }
    isn_gpu_rerank_stats x;
    isn_gpu_rerank_stats_get(view->rerank, &x);
    prom_family(out, "isn_rerank_device_total", "counter",
                "Second-stage calls by the device that scored them (a GPU pass that failed and was re-run on the "
                "CPU counts as the CPU's).");
    buffer_printf(out, "isn_rerank_device_total{device=\"cpu\"} %llu\nisn_rerank_device_total{device=\"gpu\"} %llu\n",
                  (unsigned long long)x.cpu_calls, (unsigned long long)x.gpu_calls);
    prom_u64(out, "isn_rerank_explored_total", "counter",
             "Second-stage calls sent to the device measured slower for their size, to measure it again.", x.explored);
    prom_u64(out, "isn_rerank_gpu_failures_total", "counter",
             "Second-stage GPU passes that failed and were re-run on the CPU.", x.gpu_failures);
}

void metrics_render_scheduler(search_service *service, byte_buffer *out, bool json) {
    search_service_view view;
    search_service_view_of(service, &view);
    isn_scheduler_stats st;
    isn_scheduler_get_stats(view.scheduler, &st);
    if (json) {
        render_json(&view, &st, out);
        render_gpu_json(&view, out);
    } else {
        render_prometheus(&st, out);
        render_gpu_prometheus(&view, out);
    }
}
