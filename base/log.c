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

static _Atomic bool json_lines;

void log_set_json(bool json) { atomic_store(&json_lines, json); }

/* Appends `text` JSON-escaped (without quotes) within cap; returns the new length. */
static size_t json_escape(char *out, size_t n, size_t cap, const char *text) {
    static const char HEX[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)text; *p && n + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') out[n++] = '\\', out[n++] = (char)*p;
        else if (*p == '\n') out[n++] = '\\', out[n++] = 'n';
        else if (*p < 0x20) {
            memcpy(out + n, "\\u00", 4);
            out[n + 4] = HEX[*p >> 4], out[n + 5] = HEX[*p & 15];
            n += 6;
        } else out[n++] = (char)*p;
    }
    return n;
}

/* "2025-01-31T12:00:00.123Z" */
static size_t timestamp(char *out, size_t cap) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
    return n;
}

/* One write per line, so lines from several threads never interleave. */
static void write_line(char *line, size_t n) {
    line[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, n);
    (void)ignored;
}

/* {"time":"...","level":"..." — the start of every JSON line. */
static size_t json_head(char *line, size_t cap, isn_log_level level) {
    size_t n = (size_t)snprintf(line, cap, "{\"time\":\"");
    n += timestamp(line + n, cap - n);
    n += (size_t)snprintf(line + n, cap - n, "\",\"level\":\"%s\"", isn_log_level_name(level));
    return n;
}

void log_record(isn_log_level level, const char *event, const char *const *fields, size_t count) {
    if (!log_enabled(level)) return;
    char line[4096];
    const size_t cap = sizeof line - 2; /* room for the closing brace and the newline */
    size_t n;
    if (atomic_load(&json_lines)) {
        n = json_head(line, cap, level);
        n += (size_t)snprintf(line + n, cap - n, ",\"event\":\"");
        n = json_escape(line, n, cap, event);
        for (size_t i = 0; i < count && n + 8 < cap; i++) {
            if (!fields[2 * i + 1]) continue;
            memcpy(line + n, "\",\"", 3), n += 3;
            n = json_escape(line, n, cap, fields[2 * i]);
            memcpy(line + n, "\":\"", 3), n += 3;
            n = json_escape(line, n, cap, fields[2 * i + 1]);
        }
        memcpy(line + n, "\"}", 2), n += 2;
    } else {
        n = timestamp(line, cap);
        n += (size_t)snprintf(line + n, cap - n, " %-5s %s", isn_log_level_name(level), event);
        for (size_t i = 0; i < count && n < cap; i++) {
            const char *value = fields[2 * i + 1];
            if (!value) continue;
            bool quote = !*value || strpbrk(value, " \t\"=") != NULL;
            int m = snprintf(line + n, cap - n, quote ? " %s=\"%s\"" : " %s=%s", fields[2 * i], value);
            n = m < 0 ? n : n + (size_t)m >= cap ? cap - 1 : n + (size_t)m;
        }
    }
    write_line(line, n);
}

void log_line(isn_log_level level, const char *fmt, ...) {
    if (!log_enabled(level)) return;
    if (atomic_load(&json_lines)) {
        char message[2048], line[4200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof message, fmt, ap);
        va_end(ap);
        size_t n = json_head(line, sizeof line - 2, level);
        n += (size_t)snprintf(line + n, sizeof line - 2 - n, ",\"msg\":\"");
        n = json_escape(line, n, sizeof line - 4, message);
        memcpy(line + n, "\"}", 2), n += 2;
        write_line(line, n);
        return;
    }
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

bool isn_log_limiter_allows(isn_log_limiter *limiter, uint64_t now_ns, uint64_t *left_out) {
    if (limiter->written_ns && now_ns - limiter->written_ns < ISN_LOG_LIMIT_NS) {
        limiter->left_out++;
        return false;
    }
    *left_out = limiter->left_out;
    limiter->left_out = 0;
    limiter->written_ns = now_ns ? now_ns : 1;
    return true;
}
