/* isnd: serves one index partition over gRPC. See conf/isnd.conf for every setting. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "daemon/rankers.h"
#include "daemon/server.h"

#define MAX_OVERRIDES 256

static void usage(FILE *out) {
    fprintf(out,
            "usage: isnd [--config FILE] [--index DIR] [--listen HOST:PORT] [--stats-listen HOST:PORT]\n"
            "            [--workers N] [--partition-id N] [--log-level error|warn|info|debug]\n"
            "            [--set SECTION.KEY=VALUE ...] [--check-config] [--print-config] [--version]\n"
            "Serves one index partition over gRPC (isn.v1.Search, grpc.health.v1.Health) with a\n"
            "Prometheus/JSON stats endpoint. Flags override the configuration file; every key is\n"
            "documented in conf/isnd.conf. Port 0 picks a free port (the log names it).\n"
            "  --check-config   validate the configuration (and that the index exists), then exit\n"
            "  --print-config   print the effective configuration, then exit\n"
            "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads the reloadable keys.\n");
}

/* More descriptors than connections: each connection costs one, and 1,000s are normal. */
static void raise_fd_limit(void) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
}

static int check_index_dir(const char *dir, char *err, size_t err_len) {
    char path[ISN_CONF_PATH_MAX + 32];
    if (strlen(dir) >= ISN_CONF_PATH_MAX) return snprintf(err, err_len, "index.path is too long"), -1;
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, ISN_INDEX_FILE);
    if (stat(path, &st) != 0) {
        snprintf(err, err_len, "index.path %.1024s: no %s there (build one with isn-index build)", dir, ISN_INDEX_FILE);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    static const struct option options[] = {
        {"config", required_argument, 0, 'c'},      {"index", required_argument, 0, 'i'},
        {"listen", required_argument, 0, 'l'},      {"stats-listen", required_argument, 0, 's'},
        {"workers", required_argument, 0, 'w'},     {"partition-id", required_argument, 0, 'p'},
        {"log-level", required_argument, 0, 'L'},   {"set", required_argument, 0, 'o'},
        {"check-config", no_argument, 0, 'C'},      {"print-config", no_argument, 0, 'P'},
        {"version", no_argument, 0, 'V'},           {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    static char *overrides[MAX_OVERRIDES];
    size_t num_overrides = 0;
    const char *config_path = NULL;
    bool check_only = false, print_only = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "c:i:l:s:w:p:L:o:CPVh", options, NULL)) != -1) {
        const char *key = NULL;
        switch (opt) {
        case 'c': config_path = optarg; continue;
        case 'i': key = "index.path"; break;
        case 'l': key = "server.listen"; break;
        case 's': key = "server.stats_listen"; break;
        case 'w': key = "search.workers"; break;
        case 'p': key = "index.partition_id"; break;
        case 'L': key = "log.level"; break;
        case 'o': key = ""; break;
        case 'C': check_only = true; continue;
        case 'P': print_only = true; continue;
        case 'V': printf("isnd %s\n", ISND_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (num_overrides == MAX_OVERRIDES) {
            fprintf(stderr, "isnd: too many overrides (at most %d)\n", MAX_OVERRIDES);
            return 2;
        }
        size_t len = strlen(key) + strlen(optarg) + 2;
        overrides[num_overrides] = malloc(len);
        if (!overrides[num_overrides]) return 1;
        if (*key) snprintf(overrides[num_overrides], len, "%s=%s", key, optarg);
        else snprintf(overrides[num_overrides], len, "%s", optarg);
        num_overrides++;
    }
    if (optind < argc) {
        fprintf(stderr, "isnd: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }

    static isn_server server;
    isn_conf_default(&server.conf);
    char err[4096];
    if (config_path) {
        int problems = isn_conf_load_file(&server.conf, config_path, err, sizeof err);
        if (problems != 0) {
            fprintf(stderr, "%s\n", err);
            if (problems > 0) fprintf(stderr, "isnd: %d problem%s in %s\n", problems, problems == 1 ? "" : "s", config_path);
            return 2;
        }
    }
    for (size_t i = 0; i < num_overrides; i++) {
        if (isn_conf_set_option(&server.conf, overrides[i], err, sizeof err) < 0) {
            fprintf(stderr, "isnd: command line: %s\n", err);
            return 2;
        }
    }
    if (print_only) {
        isn_conf_write(&server.conf, stdout);
        return 0;
    }
    if (isn_conf_validate(&server.conf, err, sizeof err) < 0 || check_index_dir(server.conf.index_path, err, sizeof err) < 0) {
        fprintf(stderr, "isnd: %s\n", err);
        return 2;
    }
    if (check_only) {
        printf("configuration OK%s%s\n", config_path ? ": " : "", config_path ? config_path : "");
        return 0;
    }

    log_set_level(server.conf.log_level);
    log_set_json(server.conf.log_json);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    server.config_path = config_path;
    server.overrides = (const char *const *)overrides;
    server.num_overrides = num_overrides;
    server.loop = uv_default_loop();
    log_info("isnd %s starting (pid %d, config %s, index %s)", ISND_VERSION, (int)getpid(),
             config_path ? config_path : "none", server.conf.index_path);
    if (server_start(&server, err, sizeof err) < 0) {
        log_error("cannot start: %s", err);
        return 1;
    }
    uv_run(server.loop, UV_RUN_DEFAULT);
    signals_ignore();
    serving_loops_free(&server);
    isn_grpc_stats_server_free(server.stats);
    isn_grpc_tls_free(server.grpc_tls); /* after the connections that held its contexts */
    isn_grpc_tls_free(server.stats_tls);
    rankers_stop();
    generations_free(&server); /* after the calls, which released theirs */
    uv_loop_close(server.loop);
    for (size_t i = 0; i < num_overrides; i++) free(overrides[i]);
    log_info("isnd stopped (exit status %d)", server.exit_code);
    return server.exit_code;
}
