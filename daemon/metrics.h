/* Counters and histograms of isnd's own (the transport's are grpc/'s). One set per serving loop,
 * updated under its lock by its thread; the stats endpoint sums them (metrics_add). */
#ifndef ISN_DAEMON_METRICS_H
#define ISN_DAEMON_METRICS_H

#include <stdint.h>

#include "base/base.h"
#include "grpc/framing.h"

typedef enum { RPC_SEARCH, RPC_INFO, RPC_HEALTH_CHECK, RPC_HEALTH_WATCH, RPC_REFLECTION, RPC_UNKNOWN, RPC_COUNT } rpc_method;

/* "isn.v1.Search/Search", ... as they appear in the metrics' method label. */
const char *rpc_method_label(rpc_method method);

typedef enum { STAGE_QUEUE, STAGE_RETRIEVAL, STAGE_TOTAL, STAGE_COUNT } search_stage;
const char *search_stage_label(search_stage stage);
/* The device that answered a search (its first stage), for the stage histograms' device label. */
typedef enum { STAGE_ON_CPU, STAGE_ON_GPU, STAGE_DEVICES } stage_device;
const char *stage_device_label(stage_device device);

/* What a serving loop's busy time goes to: reads (requests decoded, refused or handed on), replies (finished
 * jobs taken and their replies made), flushes (writes), the rest (timers, write callbacks, closes). */
typedef enum { LOOP_PART_READS, LOOP_PART_REPLIES, LOOP_PART_FLUSHES, LOOP_PART_OTHER, LOOP_PARTS } loop_part;
const char *loop_part_label(loop_part part);
/* Iterations busy this long are counted apart (a refusal read in one waits for most of it). */
#define LOOP_LONG_ITERATION_NS 1000000ull

typedef struct {
    uint64_t requests[RPC_COUNT][ISN_GRPC_STATUS_COUNT];
    histogram request_seconds[RPC_COUNT]; /* headers received to reply submitted */
    histogram search_stage_seconds[STAGE_DEVICES][STAGE_COUNT];
    /* Search requests refused RESOURCE_EXHAUSTED: from their arrival (the earliest their HEADERS can
     * have reached the socket) to the refusal queued for sending. What a shed costs its client inside
     * the node, apart from the network and the client's own delays. */
    histogram shed_seconds;
    /* Search replies, by the device that searched: from the job's end (its worker or GPU batch done) to
     * the loop writing its reply, the part of a query's time spent on the way back. */
    histogram reply_wait_seconds[STAGE_DEVICES];
    /* The loop's iterations: its time from one poll to the next, less its wait in the poll (reads,
     * refusals, replies, flushes). A request that reaches its socket during an iteration waits at least
     * for the rest of it, so the long ones are the tail of how soon a refusal can leave. */
    histogram loop_iteration_seconds;
    /* Their busy time by part, over all iterations and over those past LOOP_LONG_ITERATION_NS; and for
     * those, how many, and the reads and requests begun in them: what makes an iteration long. */
    uint64_t loop_work_ns[LOOP_PARTS], long_iteration_ns[LOOP_PARTS];
    uint64_t long_iterations, long_iteration_reads, long_iteration_requests;
    uint64_t loop_reads, loop_writes, loop_requests; /* socket reads and writes, requests begun: all iterations */
    uint64_t answered_late[STAGE_DEVICES]; /* OK replies written after the request's deadline (the node's clock) */
    /* The CPU's first stage on its sampled jobs (search_worker.c): how many, their wall time and their
     * worker's CPU time. CPU time per job follows the machine's speed; wall over CPU time, how long workers
     * waited for a core mid-search (more threads than cores, or other processes). */
    uint64_t retrieval_sampled_jobs, retrieval_sampled_wall_ns, retrieval_sampled_cpu_ns;
    /* connections, protocol errors, bytes and HTTP rejects: grpc/'s counters */
    uint64_t shed;                  /* RESOURCE_EXHAUSTED: overload or queue full */
    uint64_t shed_at_headers;       /* of shed: refused at HEADERS, before the request was read or decoded */
    uint64_t cancelled;             /* client left while a worker had the request */
    uint64_t expired_in_queue;      /* answered DEADLINE_EXCEEDED at the deadline, before any worker started it */
    uint64_t hits_returned;
    uint64_t reloads, reload_failures;
} metrics;

void metrics_count_request(metrics *m, rpc_method method, int status, double seconds);
/* Adds every counter and histogram of m to sum. */
void metrics_add(metrics *sum, const metrics *m);

#endif
