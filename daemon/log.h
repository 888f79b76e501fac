/* One line per event on stderr: "2025-01-31T12:00:00.123Z info  message". Safe from any thread. */
#ifndef ISN_DAEMON_LOG_H
#define ISN_DAEMON_LOG_H

#include "conf/conf.h"

void log_set_level(isn_log_level level);
bool log_enabled(isn_log_level level);
void log_line(isn_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_line(ISN_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_line(ISN_LOG_WARN, __VA_ARGS__)
#define log_info(...) log_line(ISN_LOG_INFO, __VA_ARGS__)
#define log_debug(...) \
    do { \
        if (log_enabled(ISN_LOG_DEBUG)) log_line(ISN_LOG_DEBUG, __VA_ARGS__); \
    } while (0)

#endif
