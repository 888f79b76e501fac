/* The metrics as Prometheus text (format 0.0.4) and as JSON; both read the same counters. */
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon/metrics_scheduler.h"
#include "daemon/server.h"

uint64_t process_resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    return n == 2 ? resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* jemalloc's own count when it is the allocator; AddressSanitizer's in the sanitizer builds. */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) __attribute__((weak));
extern size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

uint64_t process_heap_bytes(void) {
    if (mallctl) {
        uint64_t epoch = 1;
        size_t allocated = 0, len = sizeof epoch;
        mallctl("epoch", &epoch, &len, &epoch, len); /* refresh the statistics */
        len = sizeof allocated;
        if (mallctl("stats.allocated", &allocated, &len, NULL, 0) == 0) return allocated;
    }
    if (__sanitizer_get_current_allocated_bytes) return __sanitizer_get_current_allocated_bytes();
    struct mallinfo2 info = mallinfo2();
    return info.uordblks + info.hblkhd;
}

/* The transport's counters: the gRPC server's and the stats endpoint's together. */
typedef struct {
    isn_grpc_server_counters grpc;
    isn_grpc_stats_counters stats;
    uint64_t rejected;
} transport_counters;

static void transport_counters_get(const isn_server *server, transport_counters *t) {
    memset(t, 0, sizeof *t);
    serving_loops_counters(server, &t->grpc);
    if (server->stats) t->stats = *isn_grpc_stats_server_get_counters(server->stats);
    t->rejected = __atomic_load_n(&server->connection_limit.rejected, __ATOMIC_RELAXED);
}

void metrics_render_prometheus(isn_server *server, byte_buffer *out) {
    metrics summed;
    serving_loops_metrics(server, &summed);
    const metrics *m = &summed;
    transport_counters t;
    transport_counters_get(server, &t);
    char labels[128];

    prom_family(out, "isn_requests_total", "counter", "gRPC requests answered, by method and status code.");
    for (int method = 0; method < RPC_COUNT; method++)
        for (int status = 0; status < ISN_GRPC_STATUS_COUNT; status++)
            if (m->requests[method][status] || (status == 0 && method != RPC_UNKNOWN && method != RPC_HEALTH_WATCH &&
                                                 method != RPC_REFLECTION))
                buffer_printf(out, "isn_requests_total{method=\"%s\",code=\"%s\"} %llu\n", rpc_method_label(method),
                              isn_grpc_status_name(status), (unsigned long long)m->requests[method][status]);

    prom_family(out, "isn_request_duration_seconds", "histogram",
                "Time from a request's headers to its reply being queued for sending, by method.");
    for (int method = 0; method < RPC_COUNT; method++) {
        if (!m->request_seconds[method].count && method != RPC_SEARCH) continue;
        snprintf(labels, sizeof labels, "method=\"%s\"", rpc_method_label(method));
        prom_histogram(out, "isn_request_duration_seconds", labels, &m->request_seconds[method]);
    }

    prom_family(out, "isn_search_stage_duration_seconds", "histogram",
                "Search time by stage: queue (waiting for a worker), retrieval (analysis and first stage), total "
                "(request received to reply ready), by the device that searched.");
    for (int device = 0; device < STAGE_DEVICES; device++)
        for (int stage = 0; stage < STAGE_COUNT; stage++) {
            snprintf(labels, sizeof labels, "stage=\"%s\",device=\"%s\"", search_stage_label(stage),
                     stage_device_label(device));
            prom_histogram(out, "isn_search_stage_duration_seconds", labels, &m->search_stage_seconds[device][stage]);
        }

    prom_family(out, "isn_shed_duration_seconds", "histogram",
                "Search requests refused RESOURCE_EXHAUSTED: time from their arrival (the earliest their HEADERS can "
                "have reached the socket) to the refusal's last frame handed to the socket.");
    prom_histogram(out, "isn_shed_duration_seconds", "", &m->shed_seconds);

    prom_family(out, "isn_loop_iteration_seconds", "histogram",
                "The serving loops' iterations: time from one poll to the next less the wait in the poll (reads, "
                "refusals, replies, flushes). A request reaching its socket during one waits for the rest of it.");
    prom_histogram(out, "isn_loop_iteration_seconds", "", &m->loop_iteration_seconds);
    prom_family(out, "isn_loop_work_seconds_total", "counter",
                "The serving loops' busy time by part: reads (requests decoded, refused or handed on), replies "
                "(finished jobs taken, their replies made), flushes (writes), other (timers, write callbacks, closes).");
    for (int part = 0; part < LOOP_PARTS; part++)
        buffer_printf(out, "isn_loop_work_seconds_total{part=\"%s\"} %.6f\n", loop_part_label(part),
                      (double)m->loop_work_ns[part] / 1e9);
    prom_family(out, "isn_loop_long_iteration_seconds_total", "counter",
                "Of isn_loop_work_seconds_total, the iterations busy past 1 ms, by part.");
    for (int part = 0; part < LOOP_PARTS; part++)
        buffer_printf(out, "isn_loop_long_iteration_seconds_total{part=\"%s\"} %.6f\n", loop_part_label(part),
                      (double)m->long_iteration_ns[part] / 1e9);
    prom_u64(out, "isn_loop_reads_total", "counter", "Socket reads that brought bytes, on the serving loops.", m->loop_reads);
    prom_u64(out, "isn_loop_writes_total", "counter", "Socket writes of replies and other output, on the serving loops.",
             m->loop_writes);
    prom_u64(out, "isn_loop_requests_total", "counter", "Requests (HEADERS) begun on the serving loops, refused ones included.",
             m->loop_requests);
    prom_u64(out, "isn_loop_long_iterations_total", "counter", "Serving loop iterations busy past 1 ms.",
             m->long_iterations);
    prom_u64(out, "isn_loop_long_iteration_reads_total", "counter",
             "Socket reads in the serving loop iterations busy past 1 ms.", m->long_iteration_reads);
    prom_u64(out, "isn_loop_long_iteration_requests_total", "counter",
             "Requests (HEADERS) begun in the serving loop iterations busy past 1 ms.", m->long_iteration_requests);

    prom_family(out, "isn_reply_wait_seconds", "histogram",
                "Search replies: time from the job's end (its worker or GPU batch done) to the serving loop writing "
                "the reply, by the device that searched.");
    for (int device = 0; device < STAGE_DEVICES; device++) {
        snprintf(labels, sizeof labels, "device=\"%s\"", stage_device_label(device));
        prom_histogram(out, "isn_reply_wait_seconds", labels, &m->reply_wait_seconds[device]);
    }
    prom_family(out, "isn_answered_late_total", "counter",
                "Search replies with results written after the request's deadline (by the node's clock: its budget "
                "counts from the request's arrival), by the device that searched.");
    for (int device = 0; device < STAGE_DEVICES; device++)
        buffer_printf(out, "isn_answered_late_total{device=\"%s\"} %llu\n", stage_device_label(device),
                      (unsigned long long)m->answered_late[device]);

    prom_u64(out, "isn_search_retrieval_sampled_jobs_total", "counter",
             "CPU first stages whose worker thread's CPU time was taken (one in a few, answered OK).",
             m->retrieval_sampled_jobs);
    prom_family(out, "isn_search_retrieval_sampled_seconds_total", "counter",
                "Those first stages' time: wall (as isn_search_stage_duration_seconds) and the worker thread's CPU "
                "time. CPU time per job follows the machine's speed; wall over CPU, the workers' waits for a core "
                "mid-search.");
    buffer_printf(out, "isn_search_retrieval_sampled_seconds_total{clock=\"wall\"} %.9f\n"
                       "isn_search_retrieval_sampled_seconds_total{clock=\"cpu\"} %.9f\n",
                  (double)m->retrieval_sampled_wall_ns / 1e9, (double)m->retrieval_sampled_cpu_ns / 1e9);
    prom_u64(out, "isn_inflight_requests", "gauge", "Search requests handed to workers and not yet answered.",
             serving_loops_inflight(server));
    prom_u64(out, "isn_queued_requests", "gauge", "Search requests waiting for a worker.",
             server->pool ? search_service_queued(server->pool) : 0);
    prom_u64(out, "isn_running_requests", "gauge", "Search requests a worker is running.",
             server->pool ? search_service_running(server->pool) : 0);
    prom_u64(out, "isn_open_streams", "gauge", "HTTP/2 request streams held (receiving, queued, running or replying).",
             t.grpc.open_calls);
    prom_u64(out, "isn_workers", "gauge", "Search worker threads.", server->num_workers);
    if (server->conf.gpu_enable && server->pool) {
        prom_u64(out, "isn_gpu_up", "gauge",
                 "1 while the GPU that gpu.enable asks for serves the first stage, 0 while the index uploads or when "
                 "none could be used (the node serves on the CPU; /readyz says which). Only with gpu.enable = true.",
                 search_service_has_gpu(server->pool));
        prom_u64(out, "isn_gpu_loading", "gauge",
                 "1 while the first index generation uploads to the GPU after the node became ready on the CPU.",
                 search_service_gpu_uploading(server->pool));
        uint64_t attached = search_service_gpu_attached_ns(server->pool);
        prom_family(out, "isn_gpu_startup_seconds", "gauge",
                    "Seconds from isnd's start to the GPU first stage serving, when it uploaded after the node became "
                    "ready on the CPU; 0 before, or when it uploaded first (isn_startup_seconds has it).");
        buffer_printf(out, "isn_gpu_startup_seconds %.3f\n",
                      attached ? (double)(attached - server->start_ns) / 1e9 : 0.0);
    }
    prom_u64(out, "isn_shed_total", "counter",
             "Search requests refused with RESOURCE_EXHAUSTED (queue full or overload; see isn_scheduler_shed_total).",
             m->shed);
    prom_u64(out, "isn_shed_at_headers_total", "counter",
             "Of isn_shed_total: refused when their HEADERS came, before the request body was read or decoded.",
             m->shed_at_headers);
    if (server->pool) metrics_render_scheduler(server->pool, out, false);
    prom_u64(out, "isn_cancelled_total", "counter", "Search requests whose client left before the reply.", m->cancelled);
    prom_u64(out, "isn_expired_in_queue_total", "counter",
             "Search requests answered DEADLINE_EXCEEDED at their deadline while still queued.", m->expired_in_queue);
    prom_u64(out, "isn_hits_returned_total", "counter", "Hits sent in Search replies.", m->hits_returned);

    prom_family(out, "isn_connections", "gauge", "Open client connections, by protocol.");
    buffer_printf(out, "isn_connections{protocol=\"grpc\"} %u\nisn_connections{protocol=\"http\"} %u\n",
                  t.grpc.connections, t.stats.connections);
    prom_u64(out, "isn_connections_accepted_total", "counter", "gRPC connections accepted.", t.grpc.connections_accepted);
    prom_u64(out, "isn_connections_rejected_total", "counter", "Connections closed at once: max_connections reached.",
             t.rejected);
    prom_u64(out, "isn_connections_timed_out_total", "counter",
             "Connections closed for a missing preface, a stalled request or idleness.",
             t.grpc.connections_timed_out + t.stats.connections_timed_out);
    prom_u64(out, "isn_protocol_errors_total", "counter", "HTTP/2 protocol errors that ended a connection.",
             t.grpc.protocol_errors);
    prom_u64(out, "isn_http_rejects_total", "counter", "Streams refused as not gRPC (HTTP 405 or 415).", t.grpc.http_rejects);
    prom_u64(out, "isn_received_bytes_total", "counter", "gRPC request body bytes received.", t.grpc.bytes_received);
    prom_u64(out, "isn_sent_bytes_total", "counter", "gRPC reply message bytes sent.", t.grpc.bytes_sent);
    prom_u64(out, "isn_stats_requests_total", "counter", "Requests to this stats endpoint.", t.stats.requests);
    prom_u64(out, "isn_event_loops", "gauge", "Event loops serving gRPC connections (server.loops).", server->num_loops);
    prom_family(out, "isn_loop_connections", "gauge", "Open gRPC connections, by the event loop that serves them.");
    for (uint32_t i = 0; i < server->num_loops; i++) {
        buffer_printf(out, "isn_loop_connections{loop=\"%u\"} %u\n", i,
                      isn_grpc_server_read_counters(server->loops[i].grpc).connections);
    }
    prom_family(out, "isn_loop_busy_seconds_total", "counter",
                "Time each event loop spent working (outside its poll): near 1 s a second, the loop is the bottleneck.");
    for (uint32_t i = 0; i < server->num_loops; i++) {
        buffer_printf(out, "isn_loop_busy_seconds_total{loop=\"%u\"} %.6f\n", i,
                      (double)isn_grpc_server_read_counters(server->loops[i].grpc).loop_busy_ns / 1e9);
    }
    prom_family(out, "isn_loop_cpu_wait_seconds_total", "counter",
                "Time each event loop's thread waited for a CPU while ready to run (the kernel's run delay): the "
                "requests it held waited as long, unseen by the refusal and latency histograms.");
    for (uint32_t i = 0; i < server->num_loops; i++) {
        pid_t tid = atomic_load(&server->loops[i].tid);
        int64_t waited = tid ? isn_thread_cpu_wait_ns(tid) : -1;
        if (waited >= 0) buffer_printf(out, "isn_loop_cpu_wait_seconds_total{loop=\"%u\"} %.6f\n", i, (double)waited / 1e9);
    }
    isn_grpc_render_protection_counters(&t.grpc, server->stats, "isn", out);
    isn_grpc_tls_render_metrics("isn", server->grpc_tls, server->stats_tls, out);
    prom_u64(out, "isn_reloads_total", "counter", "SIGHUP reloads applied.", m->reloads);
    prom_u64(out, "isn_reload_failures_total", "counter", "SIGHUP reloads refused.", m->reload_failures);

    const isn_index_info *info = server->info;
    prom_u64(out, "isn_index_documents", "gauge", "Documents in the served partition.", info ? info->num_docs : 0);
    prom_u64(out, "isn_index_terms", "gauge", "Distinct terms in the served partition.", info ? info->num_terms : 0);
    prom_u64(out, "isn_index_postings", "gauge", "Postings in the served partition.", info ? info->num_postings : 0);
    prom_u64(out, "isn_index_bytes", "gauge", "Size of the index file.", info ? info->file_bytes : 0);
    prom_family(out, "isn_index_info", "gauge", "Served partition (value 1).");
    buffer_printf(out, "isn_index_info{partition=\"%u\",version=\"%u\"} 1\n", server->conf.partition_id,
                  info ? info->version : 0);

    generations_render_prometheus(server, out);
    prom_u64(out, "isn_ready", "gauge", "1 when serving: index loaded, workers warm, not draining.", server_ready(server));
    uint64_t ready_ns = server->ready_ns;
    prom_family(out, "isn_startup_seconds", "gauge",
                "Seconds from isnd's start to ready (its first index generation opened, verified and warm); 0 before.");
    buffer_printf(out, "isn_startup_seconds %.3f\n", ready_ns ? (double)(ready_ns - server->start_ns) / 1e9 : 0.0);
    prom_u64(out, "isn_draining", "gauge", "1 while draining after SIGTERM or SIGINT.", server->state == SERVER_DRAINING);
    prom_u64(out, "isn_heap_allocated_bytes", "gauge", "Heap bytes in use (allocator statistics).", process_heap_bytes());
    isn_grpc_render_process_metrics(out, server->start_time);
    prom_family(out, "isn_build_info", "gauge", "The program, its version and what it serves (value 1).");
    buffer_printf(out, "isn_build_info{program=\"isnd\",version=\"%s\",partition=\"%u\",cuda=\"%s\"} 1\n", ISND_VERSION,
                  server->conf.partition_id,
#if ISN_WITH_CUDA
                  "true"
#else
                  "false"
#endif
    );
}

static void json_histogram(byte_buffer *out, const histogram *h) {
    buffer_printf(out, "{\"count\":%llu,\"sum_seconds\":%.9g,\"buckets\":[", (unsigned long long)h->count, h->sum);
    uint64_t cumulative = 0;
    for (int i = 0; i <= HISTOGRAM_BUCKETS; i++) {
        cumulative += h->buckets[i];
        if (i < HISTOGRAM_BUCKETS)
            buffer_printf(out, "%s{\"le\":%g,\"count\":%llu}", i ? "," : "", HISTOGRAM_BOUNDS[i],
                          (unsigned long long)cumulative);
        else buffer_printf(out, ",{\"le\":\"+Inf\",\"count\":%llu}", (unsigned long long)cumulative);
    }
    buffer_printf(out, "]}");
}

void metrics_render_json(isn_server *server, byte_buffer *out) {
    metrics summed;
    serving_loops_metrics(server, &summed);
    const metrics *m = &summed;
    transport_counters t;
    transport_counters_get(server, &t);
    const isn_index_info *info = server->info;
    static const char *const STATES[] = {"starting", "ready", "draining", "stopping"};
    buffer_printf(out, "{\"version\":\"%s\",\"state\":\"%s\",\"ready\":%s,\"uptime_seconds\":%.3f,", ISND_VERSION,
                  STATES[server->state], server_ready(server) ? "true" : "false",
                  (double)(isn_now_ns() - server->start_ns) / 1e9);
    buffer_printf(out, "\"listen\":\"%s\",\"stats_listen\":\"%s\",", server->grpc_address, server->stats_address);
    buffer_printf(out, "\"index\":{\"partition_id\":%u,\"documents\":%u,\"terms\":%u,\"postings\":%llu,\"bytes\":%llu},",
                  server->conf.partition_id, info ? info->num_docs : 0, info ? info->num_terms : 0,
                  (unsigned long long)(info ? info->num_postings : 0), (unsigned long long)(info ? info->file_bytes : 0));
    generations_render_json(server, out);
    buffer_printf(out, ",\"requests\":{");
    bool first_method = true;
    for (int method = 0; method < RPC_COUNT; method++) {
        buffer_printf(out, "%s\"%s\":{", first_method ? "" : ",", rpc_method_label(method));
        first_method = false;
        bool first = true;
        for (int status = 0; status < ISN_GRPC_STATUS_COUNT; status++) {
            if (!m->requests[method][status]) continue;
            buffer_printf(out, "%s\"%s\":%llu", first ? "" : ",", isn_grpc_status_name(status),
                          (unsigned long long)m->requests[method][status]);
            first = false;
        }
        buffer_printf(out, "}");
    }
    buffer_printf(out, "},\"request_duration_seconds\":{");
    for (int method = 0; method < RPC_COUNT; method++) {
        buffer_printf(out, "%s\"%s\":", method ? "," : "", rpc_method_label(method));
        json_histogram(out, &m->request_seconds[method]);
    }
    buffer_printf(out, "},\"search_stage_duration_seconds\":{");
    for (int stage = 0; stage < STAGE_COUNT; stage++) {
        buffer_printf(out, "%s\"%s\":", stage ? "," : "", search_stage_label(stage));
        histogram all = m->search_stage_seconds[STAGE_ON_CPU][stage]; /* /stats: both devices together */
        histogram_add(&all, &m->search_stage_seconds[STAGE_ON_GPU][stage]);
        json_histogram(out, &all);
    }
    buffer_printf(out,
                  "},\"inflight\":%u,\"queued\":%u,\"running\":%u,\"open_streams\":%u,\"workers\":%u,"
                  "\"connections\":{\"grpc\":%u,\"http\":%u,\"accepted\":%llu,\"rejected\":%llu,\"timed_out\":%llu},"
                  "\"protocol_errors\":%llu,\"http_rejects\":%llu,\"shed\":%llu,\"cancelled\":%llu,"
                  "\"hits_returned\":%llu,\"received_bytes\":%llu,\"sent_bytes\":%llu,\"reloads\":%llu,"
                  "\"resident_memory_bytes\":%llu,\"heap_allocated_bytes\":%llu",
                  serving_loops_inflight(server), server->pool ? search_service_queued(server->pool) : 0,
                  server->pool ? search_service_running(server->pool) : 0, t.grpc.open_calls, server->num_workers,
                  t.grpc.connections, t.stats.connections, (unsigned long long)t.grpc.connections_accepted,
                  (unsigned long long)t.rejected,
                  (unsigned long long)(t.grpc.connections_timed_out + t.stats.connections_timed_out),
                  (unsigned long long)t.grpc.protocol_errors, (unsigned long long)t.grpc.http_rejects,
                  (unsigned long long)m->shed, (unsigned long long)m->cancelled,
                  (unsigned long long)m->hits_returned, (unsigned long long)t.grpc.bytes_received,
                  (unsigned long long)t.grpc.bytes_sent, (unsigned long long)m->reloads,
                  (unsigned long long)process_resident_bytes(), (unsigned long long)process_heap_bytes());
    if (server->pool) {
        buffer_printf(out, ",");
        metrics_render_scheduler(server->pool, out, true);
    }
    buffer_printf(out, "}\n");
}
