/* The gRPC server core fed raw bytes: a real isn_grpc_server on a libuv loop (the one isnd and isn-agg
 * run), a loopback connection that sends the HTTP/2 preface and then the input, and handlers that
 * answer, fail or hold calls the way the programs do. The memory budget and the per-connection
 * limits are small so that their paths are reached. After each input the connection must be gone
 * and every budget charge released but what the pooled calls keep. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpc/server.h"
#include "grpc/client.h"
#include "proto/isn.pb-c.h"
#include "loopback_client.h"

static uv_loop_t loop;
static isn_grpc_server *server;
static int port;
static isn_grpc_call *held[8];
static int num_held;

static void on_request(isn_grpc_call *call, void *app) {
    (void)app;
    Isn__V1__SearchRequest *request =
        isn_grpc_call_unpack(call, &isn__v1__search_request__descriptor, NULL); /* answers INVALID_ARGUMENT itself */
    if (!request) return;
    if (request->k % 3 == 1 && num_held < 8) { /* answered after the input: abandoned when the client left */
        isn_grpc_call_hold(call);
        held[num_held++] = call;
    } else if (request->k % 3 == 2) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_NOT_FOUND, "no such %s", request->query);
    } else {
        Isn__V1__SearchResponse reply = ISN__V1__SEARCH_RESPONSE__INIT;
        reply.request_id = request->request_id;
        isn_grpc_call_reply_message(call, &reply.base);
    }
    protobuf_c_message_free_unpacked(&request->base, NULL);
}

static const isn_grpc_server_handlers HANDLERS = {.on_request = on_request};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    uv_loop_init(&loop);
    static isn_grpc_connection_limit limit = {.max = 4};
    isn_grpc_server_config config = {
        .max_concurrent_streams = 16,
        .max_message_bytes = 1 << 16,
        .header_timeout_ms = 1000,
        .idle_timeout_ms = 1000,
        .limit = &limit,
        .max_requests_per_connection = 8,
        .memory_budget_bytes = 256 << 10,
        .max_header_list_bytes = 2048,
        .max_early_resets_per_second = 5,
    };
    server = isn_grpc_server_new(&loop, &config, &HANDLERS, NULL);
    char bound[64], err[256];
    if (!server || isn_grpc_server_listen(server, "127.0.0.1:0", bound, sizeof bound, err, sizeof err) != 0) abort();
    port = atoi(strrchr(bound, ':') + 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = fuzz_connect_loopback(port);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    uint8_t *bytes = malloc(24 + size);
    memcpy(bytes, PREFACE, 24);
    memcpy(bytes + 24, data, size);
    size_t sent = 0, total = 24 + size;
    bool closed = false, shut = false;
    int quiet = 0; /* loop turns in a row that brought no answer bytes */
    char sink[65536];
    /* Everything is sent, the answers are read until the server falls quiet (so that replies,
     * trailers and resets are written), then EOF; until the server has closed: it closes on EOF,
     * an error or its own decision. */
    for (int turn = 0; turn < 100000 && !closed; turn++) {
        if (sent < total) {
            ssize_t n = send(fd, bytes + sent, total - sent, MSG_NOSIGNAL);
            if (n > 0) sent += (size_t)n;
            else if (n < 0 && errno != EAGAIN) sent = total;
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        if (turn == 2)
            while (num_held) { /* the program's late answers */
                isn_grpc_call *call = held[--num_held];
                if (isn_grpc_call_unhold(call)) isn_grpc_call_fail(call, ISN_GRPC_STATUS_DEADLINE_EXCEEDED, "late");
            }
        ssize_t got, any = 0;
        while ((got = recv(fd, sink, sizeof sink, 0)) > 0) any += got;
        if (got == 0 || (got < 0 && errno != EAGAIN)) closed = true;
        quiet = any ? 0 : quiet + 1;
        if (sent == total && !shut && quiet > 20) {
            shutdown(fd, SHUT_WR);
            shut = true;
        }
    }
    free(bytes);
    close(fd);
    while (num_held) {
        isn_grpc_call *call = held[--num_held];
        if (isn_grpc_call_unhold(call)) isn_grpc_call_fail(call, ISN_GRPC_STATUS_DEADLINE_EXCEEDED, "late");
    }
    for (int turn = 0; turn < 100000 && isn_grpc_server_read_counters(server).connections; turn++)
        uv_run(&loop, UV_RUN_NOWAIT);
    const isn_grpc_server_counters counters = isn_grpc_server_read_counters(server);
    if (counters.connections || counters.open_calls || counters.memory_used != counters.memory_pooled) {
        fprintf(stderr, "left behind: %u connections, %u calls, %llu bytes charged (%llu by pooled calls)\n",
                counters.connections, counters.open_calls, (unsigned long long)counters.memory_used,
                (unsigned long long)counters.memory_pooled);
        abort();
    }
    return 0;
}
