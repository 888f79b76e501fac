/* W3C Trace Context (traceparent, https://www.w3.org/TR/trace-context/) over gRPC metadata: the
 * server core keeps the header a call came with; a program that calls further (isn-agg) sends a
 * child of it, same trace id and a span id of its own, so one query's log lines share a trace id
 * from the client through isn-agg to every isnd. */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "grpc/server_internal.h"

const char *isn_grpc_call_traceparent(const isn_grpc_call *call) { return call->traceparent; }

const char *isn_grpc_call_via(const isn_grpc_call *call) { return call->via_too_long ? NULL : call->via; }

static bool hex_run(const char *s, size_t n, bool all_zero_bad) {
    bool nonzero = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
        if (c != '0') nonzero = true;
    }
    return nonzero || !all_zero_bad;
}

/* version 00 (and later versions read as 00 would, per the spec): "VV-TRACEID32-PARENT16-FL" */
bool isn_grpc_trace_parse(const char *value, isn_grpc_trace *out) {
    if (!value || strlen(value) < ISN_GRPC_TRACEPARENT_LEN) return false;
    if (!hex_run(value, 2, false) || !strncmp(value, "ff", 2) || value[2] != '-' || !hex_run(value + 3, 32, true) ||
        value[35] != '-' || !hex_run(value + 36, 16, true) || value[52] != '-' || !hex_run(value + 53, 2, false))
        return false;
    if (!strncmp(value, "00", 2) && value[ISN_GRPC_TRACEPARENT_LEN]) return false; /* 00 has nothing after */
    memcpy(out->trace_id, value + 3, 32);
    out->trace_id[32] = '\0';
    memcpy(out->span_id, value + 36, 16);
    out->span_id[16] = '\0';
    unsigned flags = 0;
    sscanf(value + 53, "%2x", &flags);
    out->flags = (uint8_t)flags;
    return true;
}

static void random_hex(char *out, size_t digits) {
    static const char HEX[] = "0123456789abcdef";
    uint8_t bytes[16] = {0};
    if (getrandom(bytes, digits / 2, GRND_NONBLOCK) != (ssize_t)(digits / 2)) {
        /* no entropy yet (early boot): a clock-based value still tells requests apart */
        uint64_t x = isn_now_ns() ^ ((uint64_t)getpid() << 32);
        for (size_t i = 0; i < digits / 2; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, bytes[i] = (uint8_t)x;
    }
    bool zero = true;
    for (size_t i = 0; i < digits / 2; i++) {
        out[2 * i] = HEX[bytes[i] >> 4], out[2 * i + 1] = HEX[bytes[i] & 15];
        if (bytes[i]) zero = false;
    }
    if (zero) out[digits - 1] = '1'; /* all zeros is invalid */
    out[digits] = '\0';
}

void isn_grpc_trace_child(const char *incoming, isn_grpc_trace *parent, char out[ISN_GRPC_TRACEPARENT_LEN + 1]) {
    isn_grpc_trace t;
    if (!isn_grpc_trace_parse(incoming, &t)) {
        random_hex(t.trace_id, 32);
        t.flags = 0;
    }
    random_hex(t.span_id, 16);
    if (parent) *parent = t;
    snprintf(out, ISN_GRPC_TRACEPARENT_LEN + 1, "00-%s-%s-%02x", t.trace_id, t.span_id, t.flags);
}
