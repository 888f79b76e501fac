#include "daemon/metrics.h"

static const char *const METHOD_LABELS[RPC_COUNT] = {
    "isn.v1.Search/Search", "isn.v1.Search/Info", "grpc.health.v1.Health/Check",
    "grpc.health.v1.Health/Watch", "grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "unknown",
};

static const char *const STAGE_LABELS[STAGE_COUNT] = {"queue", "retrieval", "total"};

const char *rpc_method_label(rpc_method method) {
    return (unsigned)method < RPC_COUNT ? METHOD_LABELS[method] : "unknown";
}

const char *search_stage_label(search_stage stage) {
    return (unsigned)stage < STAGE_COUNT ? STAGE_LABELS[stage] : "?";
}

const char *stage_device_label(stage_device device) { return device == STAGE_ON_GPU ? "gpu" : "cpu"; }

const char *loop_part_label(loop_part part) {
    static const char *const labels[LOOP_PARTS] = {"reads", "replies", "flushes", "other"};
    return (unsigned)part < LOOP_PARTS ? labels[part] : "?";
}

void metrics_count_request(metrics *m, rpc_method method, int status, double seconds) {
    if ((unsigned)method >= RPC_COUNT) method = RPC_UNKNOWN;
    if (status < 0 || status >= ISN_GRPC_STATUS_COUNT) status = ISN_GRPC_STATUS_UNKNOWN;
    m->requests[method][status]++;
    histogram_observe(&m->request_seconds[method], seconds);
}

void metrics_add(metrics *sum, const metrics *m) {
    for (int method = 0; method < RPC_COUNT; method++) {
        for (int status = 0; status < ISN_GRPC_STATUS_COUNT; status++)
            sum->requests[method][status] += m->requests[method][status];
        histogram_add(&sum->request_seconds[method], &m->request_seconds[method]);
    }
    for (int device = 0; device < STAGE_DEVICES; device++)
        for (int stage = 0; stage < STAGE_COUNT; stage++)
            histogram_add(&sum->search_stage_seconds[device][stage], &m->search_stage_seconds[device][stage]);
    histogram_add(&sum->shed_seconds, &m->shed_seconds);
    histogram_add(&sum->loop_iteration_seconds, &m->loop_iteration_seconds);
    for (int part = 0; part < LOOP_PARTS; part++) {
        sum->loop_work_ns[part] += m->loop_work_ns[part];
        sum->long_iteration_ns[part] += m->long_iteration_ns[part];
    }
    sum->long_iterations += m->long_iterations;
    sum->long_iteration_reads += m->long_iteration_reads;
    sum->long_iteration_requests += m->long_iteration_requests;
    sum->loop_reads += m->loop_reads;
    sum->loop_writes += m->loop_writes;
    sum->loop_requests += m->loop_requests;
    for (int device = 0; device < STAGE_DEVICES; device++) {
        histogram_add(&sum->reply_wait_seconds[device], &m->reply_wait_seconds[device]);
        sum->answered_late[device] += m->answered_late[device];
    }
    sum->retrieval_sampled_jobs += m->retrieval_sampled_jobs;
    sum->retrieval_sampled_wall_ns += m->retrieval_sampled_wall_ns;
    sum->retrieval_sampled_cpu_ns += m->retrieval_sampled_cpu_ns;
    sum->shed += m->shed;
    sum->shed_at_headers += m->shed_at_headers;
    sum->cancelled += m->cancelled;
    sum->expired_in_queue += m->expired_in_queue;
    sum->hits_returned += m->hits_returned;
    sum->reloads += m->reloads;
    sum->reload_failures += m->reload_failures;
}
