#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

static const char *const LEVEL_NAMES[] = {"error", "warn", "info", "debug"};

const char *isn_log_level_name(isn_log_level level) {
    return (unsigned)level < 4 ? LEVEL_NAMES[level] : "?";
}

int isn_log_level_parse(const char *name, isn_log_level *level) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, LEVEL_NAMES[i])) return *level = (isn_log_level)i, 0;
    return -1;
}

static _Atomic int current_level = ISN_LOG_INFO;

void log_set_level(isn_log_level level) { atomic_store(&current_level, (int)level); }

bool log_enabled(isn_log_level level) { return (int)level <= atomic_load(&current_level); }

void log_line(isn_log_level level, const char *fmt, ...) {
    if (!log_enabled(level)) return;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03ldZ %-5s ", ts.tv_nsec / 1000000,
                  isn_log_level_name(level));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    n += m < (int)(sizeof line - (size_t)n - 1) ? m : (int)(sizeof line - (size_t)n - 2);
    line[n++] = '\n';
    /* One write per line, so lines from several threads never interleave. */
    ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
    (void)ignored;
}
