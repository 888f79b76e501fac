/* The ranker registry: a table of (name, file, ranker) under one mutex; each loaded ranker is a
 * reference-counted ranker_ref so that SIGHUP can swap versions while workers score with the old one. */
#include "daemon/rankers.h"

#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "conf/conf.h"

#define RANKER_SUFFIX ".ranker"
#define MAX_RANKERS 256

struct ranker_ref {
    isn_ranker *ranker;
    uint32_t refs; /* the table's own (while listed) plus one per request holding it */
};

typedef struct {
    char name[64];
    char path[ISN_CONF_PATH_MAX];
    ranker_ref *ref;
} entry;

static struct {
    pthread_mutex_t lock;
    char dir[ISN_CONF_PATH_MAX];
    const isn_index_info *info;
    entry entries[MAX_RANKERS];
    uint32_t count;
    uint32_t default_n1, max_n1;
} registry = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void unref_locked(ranker_ref *ref) {
    if (ref && --ref->refs == 0) {
        isn_ranker_free(ref->ranker);
        free(ref);
    }
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.ranker file names of dir, sorted (a stable load order for logs and duplicate checks). */
static int list_files(const char *dir, char ***names, uint32_t *count, char *err, size_t err_len) {
    *names = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, err_len, "rerank.ranker_dir %s: cannot open: %m", dir);
        return -1;
    }
    char **list = calloc(MAX_RANKERS, sizeof *list);
    uint32_t n = 0;
    struct dirent *de;
    int rc = list ? 0 : -1;
    while (rc == 0 && (de = readdir(d))) {
        size_t len = strlen(de->d_name), suffix = strlen(RANKER_SUFFIX);
        if (de->d_name[0] == '.' || len <= suffix || strcmp(de->d_name + len - suffix, RANKER_SUFFIX)) continue;
        if (n == MAX_RANKERS) {
            snprintf(err, err_len, "rerank.ranker_dir %s holds more than %d ranker files", dir, MAX_RANKERS);
            rc = -1;
        } else if (!(list[n++] = strdup(de->d_name))) {
            rc = -1;
        }
    }
    closedir(d);
    if (rc != 0) {
        for (uint32_t i = 0; list && i < n; i++) free(list[i]);
        free(list);
        return -1;
    }
    qsort(list, n, sizeof *list, by_name);
    *names = list;
    *count = n;
    return 0;
}

static bool join_path(char *out, const char *dir, const char *file) {
    int n = snprintf(out, ISN_CONF_PATH_MAX, "%s/%s", dir, file);
    return n >= 0 && n < ISN_CONF_PATH_MAX;
}

static ranker_ref *load_ref(const char *path, char *err, size_t err_len) {
    isn_ranker *ranker = isn_ranker_load(path, registry.info, err, err_len);
    if (!ranker) {
        if (!strstr(err, path)) { /* a model file's error: say which ranker file needs it */
            char why[ISN_ERR_LEN];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, err_len, "ranker %s: %s", path, why);
        }
        return NULL;
    }
    ranker_ref *ref = malloc(sizeof *ref);
    if (!ref) {
        isn_ranker_free(ranker);
        snprintf(err, err_len, "%s: out of memory", path);
        return NULL;
    }
    *ref = (ranker_ref){.ranker = ranker, .refs = 1};
    return ref;
}

static const char *describe(const isn_ranker *r, char *buf, size_t len) {
    uint32_t trees = isn_ranker_num_trees(r);
    if (trees) snprintf(buf, len, "%s, %u trees, %u inputs", isn_ranker_model_kind(r), trees, isn_ranker_num_inputs(r));
    else snprintf(buf, len, "%s, %u inputs", isn_ranker_model_kind(r), isn_ranker_num_inputs(r));
    return buf;
}

static bool same_fields(const isn_index_info *a, const isn_index_info *b) {
    if (a->num_fields != b->num_fields) return false;
    for (uint32_t f = 0; f < a->num_fields; f++)
        if (strcmp(a->fields[f], b->fields[f])) return false;
    return true;
}

int rankers_set_index(const isn_index_info *info) {
    pthread_mutex_lock(&registry.lock);
    bool same = !registry.info || same_fields(registry.info, info);
    registry.info = info;
    uint32_t default_n1 = registry.default_n1, max_n1 = registry.max_n1;
    bool any = registry.dir[0] != '\0';
    pthread_mutex_unlock(&registry.lock);
    if (same || !any) return 0;
    log_info("the new index generation has other fields: reloading the rankers against it");
    return rankers_reload(default_n1, max_n1);
}

int rankers_start(const char *dir, const isn_index_info *info, uint32_t default_n1, uint32_t max_n1, char *err,
                  size_t err_len) {
    pthread_mutex_lock(&registry.lock);
    registry.info = info;
    registry.default_n1 = default_n1;
    registry.max_n1 = max_n1;
    snprintf(registry.dir, sizeof registry.dir, "%s", dir);
    pthread_mutex_unlock(&registry.lock);
    if (!dir[0]) return 0;
    char **files;
    uint32_t n;
    if (list_files(dir, &files, &n, err, err_len) < 0) return -1;
    int rc = 0;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        entry e;
        if (!join_path(e.path, dir, files[i])) {
            snprintf(err, err_len, "%.200s/%.100s: path too long", dir, files[i]);
            rc = -1;
            break;
        }
        if (!(e.ref = load_ref(e.path, err, err_len))) {
            rc = -1;
            break;
        }
        snprintf(e.name, sizeof e.name, "%s", isn_ranker_name(e.ref->ranker));
        pthread_mutex_lock(&registry.lock);
        for (uint32_t j = 0; j < registry.count; j++)
            if (!strcmp(registry.entries[j].name, e.name)) {
                snprintf(err, err_len, "%s and %s both define ranker \"%s\"", registry.entries[j].path, e.path, e.name);
                rc = -1;
            }
        char what[96];
        if (rc == 0) {
            registry.entries[registry.count++] = e;
            log_info("ranker %s loaded from %s (%s)", e.name, e.path, describe(e.ref->ranker, what, sizeof what));
        } else {
            unref_locked(e.ref);
        }
        pthread_mutex_unlock(&registry.lock);
    }
    for (uint32_t i = 0; i < n; i++) free(files[i]);
    free(files);
    if (rc != 0) rankers_stop();
    return rc;
}

int rankers_reload(uint32_t default_n1, uint32_t max_n1) {
    pthread_mutex_lock(&registry.lock);
    registry.default_n1 = default_n1;
    registry.max_n1 = max_n1;
    char dir[ISN_CONF_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", registry.info ? registry.dir : ""); /* before the index loads: nothing yet */
    pthread_mutex_unlock(&registry.lock);
    if (!dir[0]) return 0;
    char **files, err[ISN_ERR_LEN];
    uint32_t n, failures = 0;
    if (list_files(dir, &files, &n, err, sizeof err) < 0) {
        log_error("SIGHUP: rankers not reloaded: %s; the loaded ones keep serving", err);
        return 1;
    }
    /* Loaded outside the lock (a big model takes a while); swapped in under it. */
    entry *next = malloc(MAX_RANKERS * sizeof *next);
    if (!next) {
        log_error("SIGHUP: rankers not reloaded: out of memory; the loaded ones keep serving");
        for (uint32_t i = 0; i < n; i++) free(files[i]);
        free(files);
        return 1;
    }
    uint32_t count = 0;
    bool kept[MAX_RANKERS] = {false};
    for (uint32_t i = 0; i < n; i++) {
        entry e;
        e.ref = NULL;
        if (join_path(e.path, dir, files[i])) e.ref = load_ref(e.path, err, sizeof err);
        else snprintf(err, sizeof err, "%.40s...: path too long", files[i]);
        pthread_mutex_lock(&registry.lock);
        if (!e.ref) {
            failures++;
            bool had_old = false;
            for (uint32_t j = 0; j < registry.count && !had_old; j++) /* its old version keeps serving */
                if (!strcmp(registry.entries[j].path, e.path) && !kept[j]) {
                    had_old = kept[j] = true;
                    next[count] = registry.entries[j];
                    next[count++].ref->refs++;
                    log_error("SIGHUP: ranker %s not reloaded: %s; its previous version keeps serving",
                              registry.entries[j].name, err);
                }
            if (!had_old) log_error("SIGHUP: ranker file rejected: %s", err);
            pthread_mutex_unlock(&registry.lock);
            continue;
        }
        snprintf(e.name, sizeof e.name, "%s", isn_ranker_name(e.ref->ranker));
        bool duplicate = false;
        for (uint32_t j = 0; j < count; j++) duplicate |= !strcmp(next[j].name, e.name);
        char what[96];
        if (duplicate) {
            failures++;
            log_error("SIGHUP: %s defines ranker \"%s\" again; ignored", e.path, e.name);
            unref_locked(e.ref);
        } else {
            next[count++] = e;
            log_info("SIGHUP: ranker %s loaded from %s (%s)", e.name, e.path, describe(e.ref->ranker, what, sizeof what));
        }
        pthread_mutex_unlock(&registry.lock);
    }
    for (uint32_t i = 0; i < n; i++) free(files[i]);
    free(files);
    pthread_mutex_lock(&registry.lock);
    for (uint32_t j = 0; j < registry.count; j++) unref_locked(registry.entries[j].ref);
    memcpy(registry.entries, next, count * sizeof *next);
    registry.count = count;
    pthread_mutex_unlock(&registry.lock);
    free(next);
    log_info("SIGHUP: %u rankers serving from %s (%u files rejected)", count, dir, failures);
    return (int)failures;
}

void rankers_stop(void) {
    pthread_mutex_lock(&registry.lock);
    for (uint32_t j = 0; j < registry.count; j++) unref_locked(registry.entries[j].ref);
    registry.count = 0;
    pthread_mutex_unlock(&registry.lock);
}

ranker_ref *rankers_acquire(const char *name) {
    ranker_ref *ref = NULL;
    pthread_mutex_lock(&registry.lock);
    for (uint32_t j = 0; j < registry.count && !ref; j++)
        if (!strcmp(registry.entries[j].name, name)) {
            ref = registry.entries[j].ref;
            ref->refs++;
        }
    pthread_mutex_unlock(&registry.lock);
    return ref;
}

const isn_ranker *ranker_ref_get(const ranker_ref *ref) {
    return ref->ranker;
}

void rankers_release(ranker_ref *ref) {
    pthread_mutex_lock(&registry.lock);
    unref_locked(ref);
    pthread_mutex_unlock(&registry.lock);
}

int rankers_n1(uint32_t requested, uint32_t k, uint32_t *n1, uint32_t *max_n1) {
    pthread_mutex_lock(&registry.lock);
    uint32_t want = requested ? requested : registry.default_n1;
    *max_n1 = registry.max_n1;
    pthread_mutex_unlock(&registry.lock);
    if (requested > *max_n1) return -1;
    *n1 = want < k ? k : want;
    return 0;
}

void rankers_names(char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&registry.lock);
    for (uint32_t j = 0; j < registry.count && used + 1 < len; j++) {
        int w = snprintf(buf + used, len - used, "%s%s", j ? ", " : "", registry.entries[j].name);
        if (w < 0) break;
        used += (size_t)w;
    }
    pthread_mutex_unlock(&registry.lock);
    if (!buf[0]) snprintf(buf, len, "none: set rerank.ranker_dir");
}

uint32_t rankers_count(void) {
    pthread_mutex_lock(&registry.lock);
    uint32_t n = registry.count;
    pthread_mutex_unlock(&registry.lock);
    return n;
}
