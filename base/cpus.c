/* Which and how many CPUs this process may use, and binding a thread to some of them (base.h:
 * isn_cpus_available, isn_this_thread_cpus, isn_bind_this_thread). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

uint32_t isn_cpu_quota_cpus(const char *cpu_max) {
    long long quota = 0, period = 0;
    if (!cpu_max || sscanf(cpu_max, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0) return 0;
    return (uint32_t)((quota + period - 1) / period);
}

static uint32_t affinity_cpus(void) {
    uint32_t listed = isn_this_thread_cpus(NULL, 0);
    if (listed) return listed;
    long online = sysconf(_SC_NPROCESSORS_ONLN); /* the kernel did not say */
    return online > 0 ? (uint32_t)online : 1;
}

static bool read_line(const char *path, char *line, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(line, (int)len, f) != NULL;
    fclose(f);
    return ok;
}

/* The least CPU quota on the way from the process's cgroup up to the root of the hierarchy mounted at
 * `mount` (0: none). Under a cgroup namespace the path the process sees may not exist below the mount:
 * then the mount's root is the process's own cgroup. v2 keeps "QUOTA PERIOD" in cpu.max; v1 the two in
 * cpu.cfs_quota_us and cpu.cfs_period_us. */
static uint32_t quota_along(const char *mount, const char *cgroup_path, bool v2) {
    char dir[4096];
    /* the root cgroup ("/") is the mount itself: read once */
    snprintf(dir, sizeof dir, "%s%s", mount, strcmp(cgroup_path, "/") ? cgroup_path : "");
    if (access(dir, F_OK) != 0) snprintf(dir, sizeof dir, "%s", mount);
    uint32_t least = 0;
    for (;;) {
        char path[4200], text[128], period[64];
        uint32_t cpus = 0;
        if (v2) {
            snprintf(path, sizeof path, "%s/cpu.max", dir);
            if (read_line(path, text, sizeof text)) cpus = isn_cpu_quota_cpus(text);
        } else {
            snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
            if (read_line(path, text, sizeof text)) {
                snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
                if (read_line(path, period, sizeof period)) {
                    text[strcspn(text, "\n")] = ' ';
                    strncat(text, period, sizeof text - strlen(text) - 1);
                    cpus = isn_cpu_quota_cpus(text);
                }
            }
        }
        if (cpus && (!least || cpus < least)) least = cpus;
        if (strlen(dir) <= strlen(mount)) break;
        char *slash = strrchr(dir, '/');
        if (!slash) break;
        *slash = '\0';
    }
    return least;
}

/* The quota of the cgroup the process runs in, from /proc/self/cgroup: "0::/path" (v2), or a line
 * whose controllers include cpu (v1). 0 when there is none. */
static uint32_t cgroup_quota_cpus(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096];
    uint32_t least = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':');
        char *path = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!path) continue;
        *path++ = '\0';
        controllers++;
        uint32_t cpus = 0;
        if (!strcmp(line, "0") && !*controllers) {
            cpus = quota_along("/sys/fs/cgroup", path, true);
        } else {
            char list[256];
            snprintf(list, sizeof list, ",%s,", controllers);
            if (!strstr(list, ",cpu,")) continue;
            char mount[300];
            snprintf(mount, sizeof mount, "/sys/fs/cgroup/%s", controllers);
            cpus = quota_along(mount, path, false);
        }
        if (cpus && (!least || cpus < least)) least = cpus;
    }
    fclose(f);
    return least;
}

uint32_t isn_cpus_available(void) {
    uint32_t cpus = affinity_cpus(), quota = cgroup_quota_cpus();
    return quota && quota < cpus ? quota : cpus;
}

uint32_t isn_this_thread_cpus(int *cpus, uint32_t max) {
    for (int n = 1024; n <= 1 << 16; n *= 2) {
        cpu_set_t *set = CPU_ALLOC(n);
        if (!set) return 0;
        size_t size = CPU_ALLOC_SIZE(n);
        if (sched_getaffinity(0, size, set) != 0) {
            CPU_FREE(set);
            if (errno == EINVAL) continue; /* more CPUs than the set holds */
            return 0;
        }
        uint32_t count = 0;
        for (int c = 0; c < n; c++) {
            if (!CPU_ISSET_S(c, size, set)) continue;
            if (count < max) cpus[count] = c;
            count++;
        }
        CPU_FREE(set);
        return count;
    }
    return 0;
}

int isn_bind_this_thread(const int *cpus, uint32_t n, char *err, size_t err_len) {
    if (!n) return isn_error(err, err_len, "no CPU to bind the thread to");
    int highest = 0;
    for (uint32_t i = 0; i < n; i++)
        if (cpus[i] > highest) highest = cpus[i];
    cpu_set_t *set = CPU_ALLOC(highest + 1);
    if (!set) return isn_error(err, err_len, "out of memory for a CPU set");
    size_t size = CPU_ALLOC_SIZE(highest + 1);
    CPU_ZERO_S(size, set);
    for (uint32_t i = 0; i < n; i++) CPU_SET_S(cpus[i], size, set);
    int rc = sched_setaffinity(0, size, set);
    int saved = errno;
    CPU_FREE(set);
    if (rc != 0) return isn_error(err, err_len, "sched_setaffinity to %u CPUs: %s", n, strerror(saved));
    return 0;
}
