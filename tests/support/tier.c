#include "tests/support/tier.h"

#include "tests/support/files.h"

/* The lowest port the kernel hands out on its own (to connect()ing clients and to port-0 listeners). */
static int ephemeral_low(void) {
    int low = 32768, high = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
        fclose(f);
    }
    return low;
}

int support_free_ports(int *ports, int n) {
    if (n < 1 || n > 16) return -1;
    /* Below the ephemeral range: a port the kernel picked could be taken, between the pick and the daemon's
     * listen, by any process's outgoing connection or port-0 listener; one chosen here only by a process
     * choosing the same way. Randomised so that tests running side by side start far apart. Where the range
     * starts too low to stay below it (span 0), the kernel picks (port 0). */
    int first = 10000, span = ephemeral_low() - first;
    if (span < 1000) {
        first = 1024;
        span = ephemeral_low() - first;
    }
    if (span < 16) span = 0;
    /* its own generator, not tests/support/random.h's: drawing from that would change the seeded tests' data */
    uint64_t state = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL) ^ (uint64_t)clock();
    int fds[16], opened = 0;
    for (int tries = 0; opened < n && tries < 4096; tries++) { /* each held bound until all are picked */
        int port = 0;
        if (span) {
            state += 0x9e3779b97f4a7c15ull;
            uint64_t z = (state ^ (state >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            port = first + (int)((z ^ (z >> 31)) % (uint64_t)span);
        }
        /* on the wildcard: a port free there is free on every address, so a daemon may listen on it at 0.0.0.0
         * too, where a loopback port can be held by other sockets (TIME_WAIT ones from 127.0.0.x clients) */
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = htons((uint16_t)port)};
        socklen_t len = sizeof addr;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) break;
        if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
            close(fd);
            if (!span) break; /* the kernel had none to give */
            continue;
        }
        fds[opened] = fd;
        ports[opened++] = ntohs(addr.sin_port);
    }
    for (int i = 0; i < opened; i++) close(fds[i]);
    return opened == n ? 0 : -1;
}

int support_free_port(void) {
    int port;
    return support_free_ports(&port, 1) == 0 ? port : -1;
}

uint32_t support_file_count(const char *path, const char *const *needles) {
    FILE *f = fopen(path, "r");
    char line[4096];
    uint32_t count = 0;
    while (f && fgets(line, sizeof line, f)) {
        bool all = true;
        for (int i = 0; needles[i] && all; i++) all = strstr(line, needles[i]) != NULL;
        count += all;
    }
    if (f) fclose(f);
    return count;
}

bool support_file_has(const char *path, const char *needle) {
    const char *needles[] = {needle, NULL};
    return support_file_count(path, needles) > 0;
}

long long support_json_number(const char *json, const char *key) {
    char needle[80];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    const char *p = strstr(json, needle);
    return p ? atoll(p + strlen(needle)) : -1;
}

isn_grpc_client *support_connect(const char *address) {
    char err[256];
    isn_grpc_client *c = isn_grpc_connect(address, 5000, err, sizeof err);
    if (!c) fprintf(stderr, "connect %s: %s\n", address, err);
    return c;
}

pid_t support_bench_start(const char *build_dir, const char *target, const char *const *args, const char *json_path) {
    char bench[PATH_MAX];
    snprintf(bench, sizeof bench, "%s/bin/isn-bench", build_dir);
    const char *argv[64] = {bench, "--target", target};
    int argc = 3;
    for (int i = 0; args && args[i] && argc < 63; i++) argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(json_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, STDOUT_FILENO), close(fd);
        execv(bench, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

char *support_bench_finish(pid_t pid, const char *json_path) {
    int status;
    if (pid <= 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "isn-bench failed (pid %d)\n", (int)pid);
        return NULL;
    }
    size_t len;
    char *json = (char *)support_read_file(json_path, &len);
    if (!json) return NULL;
    char *text = realloc(json, len + 1);
    if (!text) {
        free(json);
        return NULL;
    }
    text[len] = '\0';
    return text;
}

void tier_init(tier *t) {
    memset(t, 0, sizeof *t);
    harness_prepare_init(&t->whole);
    snprintf(t->corpus, sizeof t->corpus, "%s/corpus.jsonl", t->whole.work_dir);
    snprintf(t->parts_dir, sizeof t->parts_dir, "%s/parts", t->whole.work_dir);
    for (int p = 0; p < TIER_MAX_PARTITIONS; p++)
        for (int r = 0; r < TIER_MAX_REPLICAS; r++) t->replicas[p][r].pid = -1;
    t->aggregator.pid = -1;
}

static int write_synthetic(const char *path, uint32_t num_docs) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (uint32_t d = 0; d < num_docs; d++) {
        fprintf(f, "{\"id\":\"doc-%u\",\"title\":\"", d);
        for (uint32_t i = 0, n = 2 + harness_random(4); i < n; i++) fprintf(f, "%s ", harness_word());
        fprintf(f, "\",\"body\":\"");
        for (uint32_t i = 0, n = 5 + harness_random(60); i < n; i++) fprintf(f, "%s ", harness_word());
        fprintf(f, "\"}\n");
    }
    return fclose(f);
}

int tier_write_synthetic_corpus(tier *t, uint64_t seed, uint32_t num_docs) {
    harness_seed(seed);
    return write_synthetic(t->corpus, num_docs);
}

static void add_query(tier_queries *q, const char *id, const char *text) {
    q->ids[q->count] = strdup(id);
    q->texts[q->count++] = strdup(text);
}

int tier_prepare_corpus(tier *t, tier_queries *queries, uint32_t max_queries, uint64_t seed, uint32_t synthetic_docs,
                        uint32_t synthetic_queries, uint32_t max_words) {
    memset(queries, 0, sizeof *queries);
    if (max_queries > TIER_MAX_QUERIES) max_queries = TIER_MAX_QUERIES;
    const char *dir = getenv("ISN_CRANFIELD_DIR") ? getenv("ISN_CRANFIELD_DIR") : "build/data/cran";
    char docs[PATH_MAX], qpath[PATH_MAX];
    snprintf(docs, sizeof docs, "%s/cranfield.jsonl", dir);
    snprintf(qpath, sizeof qpath, "%s/cranfield.queries.tsv", dir);
    snprintf(queries->qrels_path, sizeof queries->qrels_path, "%s/cranfield.qrels", dir);
    FILE *qf = fopen(qpath, "r");
    if (qf && access(docs, R_OK) == 0) {
        if (support_run_command("cp '%s' '%s'", docs, t->corpus) != 0) {
            fclose(qf);
            return -1;
        }
        char line[4096];
        while (queries->count < max_queries && fgets(line, sizeof line, qf)) {
            char *tab = strchr(line, '\t');
            if (!tab) continue;
            *tab = '\0';
            tab[1 + strcspn(tab + 1, "\r\n")] = '\0';
            add_query(queries, line, tab + 1);
        }
        fclose(qf);
        queries->have_qrels = access(queries->qrels_path, R_OK) == 0;
        fprintf(stderr, "tier: Cranfield from %s, %u queries%s\n", dir, queries->count,
                queries->have_qrels ? ", judgements" : ", no judgements");
        return 0;
    }
    if (qf) fclose(qf);
    fprintf(stderr, "tier: no Cranfield at %s: synthetic corpus\n", dir);
    harness_seed(seed);
    if (write_synthetic(t->corpus, synthetic_docs) != 0) return -1;
    if (synthetic_queries > max_queries) synthetic_queries = max_queries;
    while (queries->count < synthetic_queries) {
        char text[256], id[16];
        size_t n = 0;
        for (uint32_t i = 0, words = 1 + harness_random(max_words); i < words; i++)
            n += (size_t)snprintf(text + n, sizeof text - n, "%s ", harness_word());
        snprintf(id, sizeof id, "%u", queries->count + 1);
        add_query(queries, id, text);
    }
    return 0;
}

void tier_queries_free(tier_queries *queries) {
    for (uint32_t i = 0; i < queries->count; i++) {
        free(queries->ids[i]);
        free(queries->texts[i]);
    }
    queries->count = 0;
}

int tier_build(tier *t, uint32_t num_partitions, bool whole, const char *index_args) {
    if (num_partitions < 1 || num_partitions > TIER_MAX_PARTITIONS) return -1;
    t->num_partitions = num_partitions;
    if (whole && support_run_command("'%s/bin/isn-index' build --quiet --input '%s' --out '%s' %s >/dev/null 2>&1",
                                     t->whole.build_dir, t->corpus, t->whole.index_dir, index_args))
        return -1;
    if (num_partitions == 1) /* isn-index writes one partition as a plain index */
        return support_run_command("mkdir -p '%s' && '%s/bin/isn-index' build --quiet --input '%s' --out '%s/part-0000' %s "
                                   ">/dev/null 2>&1",
                                   t->parts_dir, t->whole.build_dir, t->corpus, t->parts_dir, index_args);
    return support_run_command("'%s/bin/isn-index' build --quiet --input '%s' --out '%s' --partitions %u %s >/dev/null 2>&1",
                               t->whole.build_dir, t->corpus, t->parts_dir, num_partitions, index_args);
}

int tier_start_replicas(tier *t, uint32_t num_replicas, const char *const *extra) {
    if (num_replicas < 1 || num_replicas > TIER_MAX_REPLICAS) return -1;
    t->num_replicas = num_replicas;
    for (uint32_t p = 0; p < t->num_partitions; p++)
        for (uint32_t r = 0; r < num_replicas; r++) {
            harness *h = &t->replicas[p][r];
            harness_prepare_init(h);
            snprintf(h->index_dir, sizeof h->index_dir, "%s/part-%04u", t->parts_dir, p);
            char id[16];
            snprintf(id, sizeof id, "%u", p);
            const char *args[48] = {"--partition-id", id, "--workers", "1"};
            int n = 4;
            for (int i = 0; extra && extra[i] && n < 47; i++) args[n++] = extra[i];
            args[n] = NULL;
            if (harness_start(h, NULL, args) != 0) return -1;
        }
    return 0;
}

void tier_partition_addresses(const tier *t, uint32_t p, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (uint32_t r = 0; r < t->num_replicas && n < cap; r++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", r ? "," : "", t->replicas[p][r].grpc_address);
}

int tier_start_agg(tier *t, const char *const *extra) {
    static char lists[TIER_MAX_PARTITIONS][TIER_MAX_REPLICAS * 64];
    const char *partitions[TIER_MAX_PARTITIONS + 1];
    for (uint32_t p = 0; p < t->num_partitions; p++) {
        tier_partition_addresses(t, p, lists[p], sizeof lists[p]);
        partitions[p] = lists[p];
    }
    partitions[t->num_partitions] = NULL;
    if (t->aggregator.work_dir[0]) harness_cleanup(&t->aggregator); /* one started before */
    harness_prepare_init(&t->aggregator);
    return harness_start_agg(&t->aggregator, partitions, extra);
}

void tier_cleanup(tier *t) {
    if (t->aggregator.work_dir[0]) harness_cleanup(&t->aggregator);
    for (uint32_t p = 0; p < TIER_MAX_PARTITIONS; p++)
        for (uint32_t r = 0; r < TIER_MAX_REPLICAS; r++)
            if (t->replicas[p][r].work_dir[0]) harness_cleanup(&t->replicas[p][r]);
    if (t->whole.work_dir[0]) harness_cleanup(&t->whole);
}
