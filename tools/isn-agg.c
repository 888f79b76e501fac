/* isn-agg: the reference aggregator (agg/agg.h) as a program: arguments, signals, its gRPC server
 * and stats endpoint, and the one poll() loop that drives them and the replica connections. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agg/agg.h"
#include "base/base.h"
#include "tools/agg_server.h"

#define MAX_POLLFDS 4096
#define GRPC_UNAVAILABLE 14

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

/* One short HTTP/1.1 exchange per connection: the request line is read with a short timeout. */
static void serve_stats(int stats_fd, agg *aggregator, byte_buffer *body) {
    int fd = accept4(stats_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    struct timeval tv = {0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char request[2048];
    ssize_t got = recv(fd, request, sizeof request - 1, 0);
    if (got <= 0) {
        close(fd);
        return;
    }
    request[got] = '\0';
    buffer_clear(body, 1 << 20);
    const char *status = "200 OK", *type = "text/plain; version=0.0.4";
    if (!strncmp(request, "GET /metrics", 12)) agg_render_metrics(aggregator, body);
    else if (!strncmp(request, "GET /healthz", 12) || !strncmp(request, "GET /readyz", 11))
        buffer_printf(body, "ok\n");
    else {
        status = "404 Not Found";
        buffer_printf(body, "not found: try /metrics or /healthz\n");
    }
    size_t len = body->len;
    char head[256];
    int hn = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                      status, type, len);
    if (send(fd, head, (size_t)hn, MSG_NOSIGNAL) == hn) {
        for (size_t sent = 0; sent < len;) {
            ssize_t w = send(fd, body->data + sent, len - sent, MSG_NOSIGNAL);
            if (w <= 0) break;
            sent += (size_t)w;
        }
    }
    close(fd);
}

static int listen_stats(const char *address, char *err, size_t err_len) {
    char host[256];
    const char *colon = strrchr(address, ':');
    size_t hlen = (size_t)(colon - address);
    if (hlen >= sizeof host) hlen = sizeof host - 1;
    memcpy(host, address, hlen);
    host[hlen] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) {
        return isn_error(err, err_len, "cannot resolve stats address %s", address);
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        isn_error(err, err_len, "cannot listen on %s: %s", address, strerror(errno));
        if (fd >= 0) close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static void usage(FILE *out) {
    fputs("usage: isn-agg [--config FILE] [--listen HOST:PORT] [--stats-listen HOST:PORT|\"\"]\n"
          "               --partition HOST:PORT[,HOST:PORT...] (once per partition, its replicas)\n"
          "               [--global-stats] [--no-hedge] [--set KEY=VALUE ...]\n"
          "Aggregates isn.v1.Search over partitions. Keys (file: KEY = VALUE, optional [agg] section;\n"
          "command line: --set KEY=VALUE): listen, stats_listen, partition (repeat), default_timeout_ms (1000),\n"
          "margin_ms (2), default_k (10), max_k (10000), hedge (true), hedge_min_us (500),\n"
          "hedge_initial_ms (20), global_stats (false), probe_interval_ms (500), failures_to_eject (3).\n"
          "The log names the ports (port 0 = any free port). SIGTERM/SIGINT stop it.\n",
          out);
}

static int parse_args(int argc, char **argv, agg_config *config) {
    agg_config_default(config);
    char err[512];
    /* The file first, so the command line overrides it (partitions from both add up). */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config") && agg_config_load(config, argv[i + 1], err, sizeof err) != 0) {
            log_error("%s", err);
            return -1;
        }
    static const struct option opts[] = {{"config", 1, 0, 'c'},    {"listen", 1, 0, 'l'}, {"stats-listen", 1, 0, 'S'},
                                         {"partition", 1, 0, 'p'}, {"global-stats", 0, 0, 'g'},
                                         {"no-hedge", 0, 0, 'n'},  {"set", 1, 0, 's'},   {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'c': break;
        case 'l': rc = agg_config_set(config, "listen", optarg, err, sizeof err); break;
        case 'S': rc = agg_config_set(config, "stats_listen", optarg, err, sizeof err); break;
        case 'p': rc = agg_config_set(config, "partition", optarg, err, sizeof err); break;
        case 'g': config->global_stats = true; break;
        case 'n': config->hedge = false; break;
        case 's': {
            char key[64];
            const char *eq = strchr(optarg, '=');
            if (!eq || (size_t)(eq - optarg) >= sizeof key) {
                snprintf(err, sizeof err, "--set wants KEY=VALUE, got \"%s\"", optarg);
                rc = -1;
                break;
            }
            memcpy(key, optarg, (size_t)(eq - optarg));
            key[eq - optarg] = '\0';
            rc = agg_config_set(config, key, eq + 1, err, sizeof err);
            break;
        }
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (rc != 0) {
            log_error("%s", err);
            return -1;
        }
    }
    if (optind < argc) {
        log_error("unexpected argument \"%s\"", argv[optind]);
        return -1;
    }
    if (agg_config_validate(config, err, sizeof err) != 0) {
        log_error("%s", err);
        return -1;
    }
    return 0;
}

static void on_rpc(void *user, agg_rpc *rpc) { agg_handle_call(user, rpc); }

static int stats_port(int stats_fd) {
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    char port[16];
    if (stats_fd < 0 || getsockname(stats_fd, (struct sockaddr *)&bound, &bound_len) != 0 ||
        getnameinfo((struct sockaddr *)&bound, bound_len, NULL, 0, port, sizeof port, NI_NUMERICSERV) != 0)
        return 0;
    return atoi(port);
}

static void run_loop(agg *aggregator, agg_server *server, int stats_fd) {
    static struct pollfd fds[MAX_POLLFDS];
    byte_buffer stats_body = {0};
    while (!stop_requested) {
        size_t n = agg_server_pollfds(server, fds, MAX_POLLFDS - 1);
        size_t server_fds = n, stats_index = SIZE_MAX;
        if (stats_fd >= 0) {
            stats_index = n;
            fds[n++] = (struct pollfd){.fd = stats_fd, .events = POLLIN};
        }
        size_t replica_start = n;
        n += agg_pollfds(aggregator, fds + n, MAX_POLLFDS - n);
        uint64_t now = isn_now_ns(), wait = agg_next_wakeup_ns(aggregator, now) - now;
        struct timespec ts = {(time_t)(wait / 1000000000ULL), (long)(wait % 1000000000ULL)};
        if (ppoll(fds, n, &ts, NULL) < 0 && errno != EINTR) break;
        agg_process(aggregator, fds + replica_start, n - replica_start);
        agg_server_process(server, fds, server_fds);
        if (stats_index != SIZE_MAX && (fds[stats_index].revents & POLLIN)) serve_stats(stats_fd, aggregator, &stats_body);
        agg_advance(aggregator);
        agg_server_flush(server);
    }
    buffer_free(&stats_body);
}

int main(int argc, char **argv) {
    static agg_config config;
    if (parse_args(argc, argv, &config) != 0) return 2;
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    char err[512];
    agg *aggregator = agg_new(&config, err, sizeof err);
    agg_server *server = aggregator ? agg_server_new(config.listen, 4u << 20, on_rpc, aggregator, err, sizeof err) : NULL;
    if (!server) {
        log_error("%s", err);
        agg_free(aggregator);
        return 1;
    }
    int stats_fd = -1;
    if (config.stats_listen[0] && (stats_fd = listen_stats(config.stats_listen, err, sizeof err)) < 0) {
        log_error("%s", err);
        return 1;
    }
    agg_fetch_partition_info(aggregator);
    log_info("ready: %u partitions, gRPC port %d, stats port %d, hedging %s, global statistics %s", config.num_partitions,
             agg_server_port(server), stats_port(stats_fd), config.hedge ? "on" : "off",
             config.global_stats ? "on" : "off");
    run_loop(aggregator, server, stats_fd);
    log_info("stopping");
    agg_server_stop_accepting(server);
    agg_fail_all(aggregator, GRPC_UNAVAILABLE, "aggregator stopping");
    agg_server_flush(server);
    agg_server_free(server);
    agg_free(aggregator);
    if (stats_fd >= 0) close(stats_fd);
    return 0;
}
