/* HOST:PORT and [IPV6]:PORT: see base.h. */
#include <string.h>

#include "base/base.h"

int isn_parse_host_port(const char *text, char *host, size_t host_len, uint16_t *port, char *err, size_t err_len) {
    const char *host_start = text, *host_end, *colon;
    if (*text == '[') {
        host_start = text + 1;
        host_end = strchr(host_start, ']');
        if (!host_end || host_end[1] != ':')
            return isn_error(err, err_len, "bad address \"%s\": expected [IPV6]:PORT", text);
        colon = host_end + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon) return isn_error(err, err_len, "bad address \"%s\": expected HOST:PORT", text);
        if (memchr(text, ':', (size_t)(colon - text)))
            return isn_error(err, err_len, "bad address \"%s\": write an IPv6 host in brackets, [::1]:PORT", text);
        host_end = colon;
    }
    size_t n = (size_t)(host_end - host_start);
    if (n == 0) return isn_error(err, err_len, "bad address \"%s\": the host is empty", text);
    if (n >= host_len) return isn_error(err, err_len, "bad address \"%s\": the host is too long", text);
    const char *digits = colon + 1;
    uint32_t value = 0;
    size_t len = strlen(digits);
    if (len == 0 || len > 5) return isn_error(err, err_len, "bad address \"%s\": the port must be a number from 0 to 65535", text);
    for (size_t i = 0; i < len; i++) {
        if (digits[i] < '0' || digits[i] > '9')
            return isn_error(err, err_len, "bad address \"%s\": the port must be a number from 0 to 65535", text);
        value = value * 10 + (uint32_t)(digits[i] - '0');
    }
    if (value > 65535) return isn_error(err, err_len, "bad address \"%s\": the port must be a number from 0 to 65535", text);
    memcpy(host, host_start, n);
    host[n] = '\0';
    *port = (uint16_t)value;
    return 0;
}
