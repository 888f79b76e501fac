/* The process_* metrics every Prometheus client library exports (CPU time, descriptors, memory,
 * start time), written once for both servers' stats endpoints, so dashboards and alerts written
 * for any exporter work on isnd and isn-agg alike. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "grpc/server.h"

/* Entries of /proc/self/fd, less the descriptor that reads it. Opened with open(2), not opendir:
 * ThreadSanitizer then sees the descriptor made anew (opendir's own open is hidden from it, and a
 * number last used by another loop's socket looked like a race). */
static uint64_t open_fds(void) {
    int fd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0) close(fd);
        return 0;
    }
    uint64_t n = 0;
    for (struct dirent *e; (e = readdir(dir));)
        if (e->d_name[0] != '.') n++;
    closedir(dir);
    return n ? n - 1 : 0;
}

void isn_grpc_render_process_metrics(byte_buffer *out, double start_time_seconds) {
    struct rusage usage;
    double cpu = 0;
    if (getrusage(RUSAGE_SELF, &usage) == 0)
        cpu = (double)usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + (double)usage.ru_stime.tv_sec +
              usage.ru_stime.tv_usec / 1e6;
    prom_family(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
    buffer_printf(out, "process_cpu_seconds_total %.6f\n", cpu);
    prom_u64(out, "process_open_fds", "gauge", "Number of open file descriptors.", open_fds());
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        prom_u64(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.", (uint64_t)limit.rlim_cur);
    unsigned long long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &resident) != 2) size = resident = 0;
        fclose(f);
    }
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    prom_u64(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", size * page);
    prom_u64(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", resident * page);
    prom_family(out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
    buffer_printf(out, "process_start_time_seconds %.3f\n", start_time_seconds);
}
