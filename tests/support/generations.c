#include "tests/support/generations.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/index.h"

int support_write_corpus(const char *path, char prefix, uint64_t seed, uint32_t docs) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    harness_seed(seed);
    for (uint32_t d = 0; d < docs; d++) {
        fprintf(f, "{\"id\":\"%c-%u\",\"title\":\"", prefix, d);
        for (uint32_t i = 0, n = 2 + harness_random(4); i < n; i++) fprintf(f, "%s ", harness_word());
        fprintf(f, "\",\"body\":\"");
        for (uint32_t i = 0, n = 5 + harness_random(60); i < n; i++) fprintf(f, "%s ", harness_word());
        fprintf(f, "\"}\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

int support_content_hash(const char *dir, char *out, size_t len) {
    char err[ISN_ERR_LEN];
    isn_index *index = isn_index_open(dir, err, sizeof err);
    if (!index) {
        fprintf(stderr, "open %s: %s\n", dir, err);
        return -1;
    }
    snprintf(out, len, "%016llx", (unsigned long long)isn_index_get_info(index)->content_hash);
    isn_index_close(index);
    return 0;
}

int support_flip_link(const char *link, const char *target) {
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", link);
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, link) != 0) {
        perror(link);
        return -1;
    }
    return 0;
}

bool support_wait_generation(isn_grpc_client *client, const char *want, int timeout_ms) {
    for (int64_t deadline = harness_now_ms() + timeout_ms; harness_now_ms() < deadline; harness_sleep_ms(20)) {
        isn_grpc_info_reply info;
        char err[256];
        if (isn_grpc_info(client, NULL, 0, false, -1, &info, err, sizeof err) != 0) continue;
        bool now = info.status == 0 && !strcmp(info.generation, want);
        isn_grpc_info_reply_free(&info);
        if (now) return true;
    }
    return false;
}

int support_init_linked(harness *h, const char *self_path, const char *target) {
    harness_init(h, self_path);
    char work[sizeof h->work_dir];
    memcpy(work, h->work_dir, sizeof work);
    snprintf(h->index_dir, sizeof h->index_dir, "%s/current", work);
    if (symlink(target, h->index_dir) != 0) {
        perror(h->index_dir);
        return -1;
    }
    return 0;
}
