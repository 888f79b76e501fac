/* The stats endpoint's HTTP/1.1 parser fed raw bytes: a real isn_grpc_stats_server on a libuv loop and
 * a loopback connection that sends the input (pipelined requests, partial heads, junk), then EOF.
 * After each input the connection must be gone. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpc/stats_endpoint.h"
#include "loopback_client.h"

static uv_loop_t loop;
static isn_grpc_stats_server *server;
static int port;

static void render_metrics(void *app, byte_buffer *body) {
    (void)app;
    prom_u64(body, "fuzz_requests_total", "counter", "Requests.", 1);
}
static void render_json(void *app, byte_buffer *body) {
    (void)app;
    buffer_printf(body, "{\"ok\":true}\n");
}
static int readiness(void *app, byte_buffer *body) {
    (void)app;
    buffer_printf(body, "ok\n");
    return 200;
}
static const isn_grpc_stats_pages PAGES = {render_metrics, render_json, readiness};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    uv_loop_init(&loop);
    isn_grpc_stats_config config = {.server_name = "fuzz", .header_timeout_ms = 1000, .idle_timeout_ms = 1000,
                                .max_connections = 4};
    server = isn_grpc_stats_server_new(&loop, &config, &PAGES, NULL);
    char bound[64], err[256];
    if (!server || isn_grpc_stats_server_listen(server, "127.0.0.1:0", bound, sizeof bound, err, sizeof err) != 0) abort();
    port = atoi(strrchr(bound, ':') + 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = fuzz_connect_loopback(port);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t sent = 0;
    bool closed = false;
    char sink[65536];
    if (size == 0) shutdown(fd, SHUT_WR);
    for (int turn = 0; turn < 100000 && !closed; turn++) {
        if (sent < size) {
            ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
            if (n > 0) sent += (size_t)n;
            else if (n < 0 && errno != EAGAIN) sent = size;
            if (sent == size) shutdown(fd, SHUT_WR);
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t got;
        while ((got = recv(fd, sink, sizeof sink, 0)) > 0) {}
        if (got == 0 || (got < 0 && errno != EAGAIN)) closed = true;
    }
    close(fd);
    for (int turn = 0; turn < 100000 && isn_grpc_stats_server_get_counters(server)->connections; turn++)
        uv_run(&loop, UV_RUN_NOWAIT);
    if (isn_grpc_stats_server_get_counters(server)->connections) {
        fprintf(stderr, "stats connection left open after EOF\n");
        abort();
    }
    return 0;
}
