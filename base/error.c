#include <stdio.h>

#include "base/base.h"

int isn_verror(char *err, size_t err_len, const char *fmt, va_list ap) {
    if (err && err_len) vsnprintf(err, err_len, fmt, ap);
    return -1;
}

int isn_error(char *err, size_t err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    isn_verror(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}
