#include "grpc/framing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const STATUS_NAMES[ISN_GRPC_STATUS_COUNT] = {
    "OK",        "CANCELLED",    "UNKNOWN",       "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",  "UNAVAILABLE",      "DATA_LOSS",         "UNAUTHENTICATED",
};

const char *isn_grpc_status_name(int status) {
    return status >= 0 && status < ISN_GRPC_STATUS_COUNT ? STATUS_NAMES[status] : "UNKNOWN";
}

void isn_grpc_write_prefix(uint8_t out[ISN_GRPC_PREFIX_BYTES], uint32_t length) {
    out[0] = 0;
    out[1] = (uint8_t)(length >> 24);
    out[2] = (uint8_t)(length >> 16);
    out[3] = (uint8_t)(length >> 8);
    out[4] = (uint8_t)length;
}

/* Every field is read and written atomically: servers on several loops may share one budget. */
static void raise_peak(isn_grpc_memory_budget *budget, uint64_t now) {
    uint64_t peak = __atomic_load_n(&budget->peak, __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&budget->peak, &peak, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

bool isn_grpc_budget_charge(isn_grpc_memory_budget *budget, uint64_t bytes) {
    if (!budget) return true;
    uint64_t limit = __atomic_load_n(&budget->limit, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&budget->used, __ATOMIC_RELAXED);
    do {
        if (limit && (bytes > limit || used > limit - bytes)) {
            __atomic_fetch_add(&budget->refused, 1, __ATOMIC_RELAXED);
            return false;
        }
    } while (!__atomic_compare_exchange_n(&budget->used, &used, used + bytes, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    raise_peak(budget, used + bytes);
    return true;
}

bool isn_grpc_budget_exchange(isn_grpc_memory_budget *budget, uint64_t release, uint64_t charge) {
    if (!budget) return true;
    uint64_t limit = __atomic_load_n(&budget->limit, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&budget->used, __ATOMIC_RELAXED), next;
    /* A pooled call gives back what it takes: no write, so that the loops, which pool every call they
     * release, do not pass the budget's cache line between them for nothing. */
    if (release == charge && used >= release && (!limit || used <= limit)) return true;
    bool fits;
    do {
        uint64_t released = used > release ? used - release : 0;
        fits = !limit || (charge <= limit && released <= limit - charge);
        next = fits ? released + charge : released;
    } while (!__atomic_compare_exchange_n(&budget->used, &used, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    if (!fits) __atomic_fetch_add(&budget->refused, 1, __ATOMIC_RELAXED);
    else if (next > used) raise_peak(budget, next);
    return fits;
}

void isn_grpc_budget_add(isn_grpc_memory_budget *budget, uint64_t bytes) {
    if (!budget || !bytes) return;
    raise_peak(budget, __atomic_add_fetch(&budget->used, bytes, __ATOMIC_RELAXED));
}

bool isn_grpc_budget_has_room(const isn_grpc_memory_budget *budget, uint64_t bytes) {
    if (!budget) return true;
    uint64_t limit = __atomic_load_n(&budget->limit, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&budget->used, __ATOMIC_RELAXED);
    return !limit || (bytes <= limit && used <= limit - bytes);
}

void isn_grpc_budget_release(isn_grpc_memory_budget *budget, uint64_t bytes) {
    if (!budget || !bytes) return;
    uint64_t used = __atomic_load_n(&budget->used, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&budget->used, &used, used > bytes ? used - bytes : 0, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

void isn_grpc_reader_init(isn_grpc_reader *reader, uint8_t *inline_buf, uint32_t inline_cap, uint32_t max_length) {
    memset(reader, 0, sizeof *reader);
    reader->inline_buf = inline_buf;
    reader->inline_cap = inline_cap;
    reader->max_length = max_length;
}

void isn_grpc_reader_set_budget(isn_grpc_reader *reader, isn_grpc_memory_budget *budget) { reader->budget = budget; }

void isn_grpc_reader_reset(isn_grpc_reader *reader) {
    if (reader->body && reader->body != reader->inline_buf) {
        free(reader->body);
        isn_grpc_budget_release(reader->budget, reader->length);
    }
    isn_grpc_memory_budget *budget = reader->budget;
    isn_grpc_reader_init(reader, reader->inline_buf, reader->inline_cap, reader->max_length);
    reader->budget = budget;
}

isn_grpc_read_result isn_grpc_reader_feed(isn_grpc_reader *reader, const uint8_t *data, size_t len) {
    while (len > 0) {
        if (reader->prefix_have < ISN_GRPC_PREFIX_BYTES) {
            size_t take = ISN_GRPC_PREFIX_BYTES - reader->prefix_have;
            if (take > len) take = len;
            memcpy(reader->prefix + reader->prefix_have, data, take);
            reader->prefix_have += (uint32_t)take;
            data += take;
            len -= take;
            if (reader->prefix_have < ISN_GRPC_PREFIX_BYTES) return ISN_GRPC_READ_OK;
            reader->messages++;
            reader->length = (uint32_t)reader->prefix[1] << 24 | (uint32_t)reader->prefix[2] << 16 |
                             (uint32_t)reader->prefix[3] << 8 | reader->prefix[4];
            if (reader->prefix[0] == 1) return ISN_GRPC_READ_COMPRESSED;
            if (reader->prefix[0] != 0) return ISN_GRPC_READ_BAD_FLAGS;
            if (reader->length > reader->max_length) return ISN_GRPC_READ_TOO_LARGE;
            if (reader->length <= reader->inline_cap) {
                reader->body = reader->inline_buf;
            } else {
                if (!isn_grpc_budget_charge(reader->budget, reader->length)) return ISN_GRPC_READ_OVER_BUDGET;
                if (!(reader->body = malloc(reader->length))) {
                    isn_grpc_budget_release(reader->budget, reader->length);
                    return ISN_GRPC_READ_OUT_OF_MEMORY;
                }
            }
            continue;
        }
        size_t take = reader->length - reader->have;
        if (take == 0) {
            /* Message complete; any further byte starts a second message. */
            return ISN_GRPC_READ_EXTRA_MESSAGE;
        }
        if (take > len) take = len;
        memcpy(reader->body + reader->have, data, take);
        reader->have += (uint32_t)take;
        data += take;
        len -= take;
    }
    return ISN_GRPC_READ_OK;
}

isn_grpc_read_result isn_grpc_reader_finish(const isn_grpc_reader *reader) {
    if (reader->messages == 0 && reader->prefix_have == 0) return ISN_GRPC_READ_NO_MESSAGE;
    if (reader->prefix_have < ISN_GRPC_PREFIX_BYTES || reader->have < reader->length) return ISN_GRPC_READ_TRUNCATED;
    return ISN_GRPC_READ_OK;
}

void isn_grpc_reader_describe(const isn_grpc_reader *reader, isn_grpc_read_result result, char *out, size_t out_len) {
    switch (result) {
    case ISN_GRPC_READ_OK: snprintf(out, out_len, "ok"); break;
    case ISN_GRPC_READ_TOO_LARGE:
        snprintf(out, out_len, "request message of %u bytes exceeds the server's limit of %u bytes", reader->length,
                 reader->max_length);
        break;
    case ISN_GRPC_READ_COMPRESSED:
        snprintf(out, out_len, "compressed messages are not supported; send them uncompressed (grpc-encoding identity)");
        break;
    case ISN_GRPC_READ_BAD_FLAGS:
        snprintf(out, out_len, "bad gRPC message flags byte 0x%02x (expected 0 or 1)", reader->prefix[0]);
        break;
    case ISN_GRPC_READ_EXTRA_MESSAGE:
        snprintf(out, out_len, "more than one request message on a unary call");
        break;
    case ISN_GRPC_READ_OUT_OF_MEMORY:
        snprintf(out, out_len, "out of memory for a request message of %u bytes", reader->length);
        break;
    case ISN_GRPC_READ_TRUNCATED:
        if (reader->prefix_have < ISN_GRPC_PREFIX_BYTES)
            snprintf(out, out_len, "request ended inside the 5-byte message prefix (%u bytes received)",
                     reader->prefix_have);
        else
            snprintf(out, out_len, "request message truncated: prefix announces %u bytes, stream ended after %u",
                     reader->length, reader->have);
        break;
    case ISN_GRPC_READ_NO_MESSAGE: snprintf(out, out_len, "request stream ended without a message"); break;
    case ISN_GRPC_READ_OVER_BUDGET:
        snprintf(out, out_len, "server memory budget for requests reached; a message of %u bytes cannot be held now",
                 reader->length);
        break;
    }
}

int isn_grpc_parse_timeout(const char *value, size_t len, uint64_t *ns) {
    if (len < 2 || len > 9) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (value[i] < '0' || value[i] > '9') return -1;
        v = v * 10 + (uint64_t)(value[i] - '0');
    }
    uint64_t scale;
    switch (value[len - 1]) {
    case 'H': scale = 3600000000000ull; break;
    case 'M': scale = 60000000000ull; break;
    case 'S': scale = 1000000000ull; break;
    case 'm': scale = 1000000ull; break;
    case 'u': scale = 1000ull; break;
    case 'n': scale = 1ull; break;
    default: return -1;
    }
    /* 8 digits of hours still fit: 99999999 h = 3.6e20 ns would not; saturate. */
    *ns = v > UINT64_MAX / scale ? UINT64_MAX : v * scale;
    return 0;
}

/* ------------------------------------------------------------------ NUL in strings */

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *value) {
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *value = v;
            return true;
        }
    }
    return false;
}

bool isn_grpc_message_varint_field(const uint8_t *data, size_t len, uint32_t field_number, uint64_t *value) {
    const uint8_t *p = data, *end = data + len;
    *value = 0;
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key) || key >> 3 == 0) return false;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &v)) return false;
            if (key >> 3 == field_number) *value = v;
            continue;
        case 1: v = 8; break;
        case 5: v = 4; break;
        case 2:
            if (!read_varint(&p, end, &v)) return false;
            break;
        default: return false; /* groups are not proto3 */
        }
        if (key >> 3 == field_number || v > (uint64_t)(end - p)) return false; /* the field is not a varint */
        p += v;
    }
    return true;
}

#define NUL_SEARCH_DEPTH 32

/* Walks one message's wire form; `fields` holds the fields down to it (`depth` of them). On a find,
 * the string field's own descriptor is the last one in `fields`, and the depth is in *found_depth.
 * Names are put together only then: most requests hold no NUL, and formatting every field's path as
 * the walk goes cost more than the walk. */
static bool find_nul_string(const ProtobufCMessageDescriptor *descriptor, const uint8_t *p, const uint8_t *end,
                            unsigned depth, const ProtobufCFieldDescriptor **fields, unsigned *found_depth) {
    while (p < end) {
        uint64_t key, len;
        if (!read_varint(&p, end, &key)) return false;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &len)) return false;
            continue;
        case 1:
            if (end - p < 8) return false;
            p += 8;
            continue;
        case 5:
            if (end - p < 4) return false;
            p += 4;
            continue;
        case 2: break;
        default: return false; /* groups are not proto3; the unpack has judged the message already */
        }
        if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return false;
        const ProtobufCFieldDescriptor *field =
            key >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(descriptor, (unsigned)(key >> 3)) : NULL;
        if (field && (field->type == PROTOBUF_C_TYPE_STRING || field->type == PROTOBUF_C_TYPE_MESSAGE)) {
            fields[depth] = field;
            if (field->type == PROTOBUF_C_TYPE_STRING && memchr(p, 0, (size_t)len)) {
                *found_depth = depth + 1;
                return true;
            }
            if (field->type == PROTOBUF_C_TYPE_MESSAGE && depth < NUL_SEARCH_DEPTH &&
                find_nul_string(field->descriptor, p, p + len, depth + 1, fields, found_depth))
                return true;
        }
        p += len;
    }
    return false;
}

bool isn_grpc_message_nul_string_field(const ProtobufCMessageDescriptor *descriptor, const uint8_t *data, size_t len,
                                   char *field, size_t field_len) {
    const ProtobufCFieldDescriptor *fields[NUL_SEARCH_DEPTH + 1];
    unsigned depth = 0;
    if (!find_nul_string(descriptor, data, data + len, 0, fields, &depth)) return false;
    /* the dotted names, as far as 127 bytes hold them */
    char path[128];
    size_t at = 0;
    for (unsigned i = 0; i < depth; i++) {
        size_t room = sizeof path - at;
        int n = snprintf(path + at, room, "%s%s", at ? "." : "", fields[i]->name);
        at = n < 0 ? at : (size_t)n >= room ? sizeof path - 1 : at + (size_t)n;
    }
    path[at] = '\0';
    if (field_len) snprintf(field, field_len, "%s", path);
    return true;
}

size_t isn_grpc_format_timeout(uint64_t ns, char *out, size_t out_len) {
    /* Finest unit first, so the value is exact whenever 8 digits allow it; a coarser unit rounds
     * up, never sending a shorter deadline than asked. UINT64_MAX ns is 5,124,096 hours: H always fits. */
    static const struct {
        char unit;
        uint64_t scale;
    } UNITS[] = {{'n', 1ull}, {'u', 1000ull}, {'m', 1000000ull}, {'S', 1000000000ull},
                 {'M', 60000000000ull}, {'H', 3600000000000ull}};
    for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++) {
        uint64_t v = ns / UNITS[i].scale + (ns % UNITS[i].scale != 0);
        if (v <= ISN_GRPC_TIMEOUT_MAX_VALUE) {
            int n = snprintf(out, out_len, "%llu%c", (unsigned long long)v, UNITS[i].unit);
            return n < 0 ? 0 : (size_t)n;
        }
    }
    return 0; /* not reached */
}

size_t isn_grpc_percent_encode(const char *in, char *out, size_t out_len) {
    static const char HEX[] = "0123456789ABCDEF";
    size_t n = 0;
    if (out_len == 0) return 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
        size_t need = plain ? 1 : 3;
        if (n + need >= out_len) break;
        if (plain) {
            out[n++] = (char)*p;
        } else {
            out[n++] = '%';
            out[n++] = HEX[*p >> 4];
            out[n++] = HEX[*p & 15];
        }
    }
    out[n] = '\0';
    return n;
}
