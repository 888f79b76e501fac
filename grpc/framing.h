/* The parts of gRPC that are not HTTP/2, shared by the server and the client of grpc/: status codes,
 * message framing, grpc-timeout, grpc-message encoding, the memory budget that bounds what a server
 * holds, and W3C trace context. Pure functions and a byte-at-a-time reader, unit-tested without sockets.
 * Every name of grpc/ starts with isn_grpc_ (ISN_GRPC_), so a program may link the official gRPC C
 * library (grpc_server, grpc_call, GRPC_STATUS_*) next to it. */
#ifndef ISN_GRPC_FRAMING_H
#define ISN_GRPC_FRAMING_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

#include "base/base.h"


#define ISN_GRPC_PREFIX_BYTES 5

typedef enum {
    ISN_GRPC_STATUS_OK = 0,
    ISN_GRPC_STATUS_CANCELLED = 1,
    ISN_GRPC_STATUS_UNKNOWN = 2,
    ISN_GRPC_STATUS_INVALID_ARGUMENT = 3,
    ISN_GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    ISN_GRPC_STATUS_NOT_FOUND = 5,
    ISN_GRPC_STATUS_ALREADY_EXISTS = 6,
    ISN_GRPC_STATUS_PERMISSION_DENIED = 7,
    ISN_GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    ISN_GRPC_STATUS_FAILED_PRECONDITION = 9,
    ISN_GRPC_STATUS_ABORTED = 10,
    ISN_GRPC_STATUS_OUT_OF_RANGE = 11,
    ISN_GRPC_STATUS_UNIMPLEMENTED = 12,
    ISN_GRPC_STATUS_INTERNAL = 13,
    ISN_GRPC_STATUS_UNAVAILABLE = 14,
    ISN_GRPC_STATUS_DATA_LOSS = 15,
    ISN_GRPC_STATUS_UNAUTHENTICATED = 16,
    ISN_GRPC_STATUS_COUNT
} isn_grpc_status_code;

/* "OK", "INVALID_ARGUMENT", ... ("UNKNOWN" for codes out of range). */
const char *isn_grpc_status_name(int status);

/* Writes the prefix of an uncompressed message of `length` bytes. */
void isn_grpc_write_prefix(uint8_t out[ISN_GRPC_PREFIX_BYTES], uint32_t length);

typedef enum {
    ISN_GRPC_READ_OK = 0,            /* consumed; more may follow */
    ISN_GRPC_READ_TOO_LARGE,         /* the prefix announces more than max_length */
    ISN_GRPC_READ_COMPRESSED,        /* compressed flag set: no compression is supported */
    ISN_GRPC_READ_BAD_FLAGS,         /* flag byte other than 0 or 1 */
    ISN_GRPC_READ_EXTRA_MESSAGE,     /* a second message on a unary call */
    ISN_GRPC_READ_OUT_OF_MEMORY,
    ISN_GRPC_READ_TRUNCATED,         /* (finish) stream ended inside a prefix or a body */
    ISN_GRPC_READ_NO_MESSAGE,        /* (finish) stream ended before any message */
    ISN_GRPC_READ_OVER_BUDGET,       /* the body would take the server past its memory budget */
} isn_grpc_read_result;

/* Memory that requests and replies may hold across all connections of a server (or of the servers
 * of several loops that share it): a charge that would pass `limit` is refused (the caller answers
 * RESOURCE_EXHAUSTED) instead of growing. Its fields are read and written atomically (__atomic), so
 * threads may share it; read them the same way. */
typedef struct {
    uint64_t limit; /* 0 = no limit */
    uint64_t used;
    uint64_t peak;    /* most used at once; the owner may lower it to `used` */
    uint64_t refused; /* charges refused */
} isn_grpc_memory_budget;

/* True (and charged) when `bytes` more fit; a NULL budget takes everything. */
bool isn_grpc_budget_charge(isn_grpc_memory_budget *budget, uint64_t bytes);
/* Charges `bytes` even past the limit: memory already taken that cannot be refused without breaking
 * what holds it (nghttp2's state, the rounding of a buffer to its capacity). The next charge that
 * would pass the limit is refused. */
void isn_grpc_budget_add(isn_grpc_memory_budget *budget, uint64_t bytes);
/* Gives back `release` bytes and charges `charge` in one atomic step: true when the charge fits once
 * the release is done. False: only the release happened (the charge is refused, as by _charge). */
bool isn_grpc_budget_exchange(isn_grpc_memory_budget *budget, uint64_t release, uint64_t charge);
/* True when `bytes` more would fit now (nothing is charged). */
bool isn_grpc_budget_has_room(const isn_grpc_memory_budget *budget, uint64_t bytes);
void isn_grpc_budget_release(isn_grpc_memory_budget *budget, uint64_t bytes);

/* Reassembles the one message of a unary request from DATA chunks of any size. Bodies up to
 * `inline_cap` bytes land in caller-provided storage; larger ones in one malloc of exactly their
 * length (bounded by max_length), released by isn_grpc_reader_reset. */
typedef struct {
    uint8_t prefix[ISN_GRPC_PREFIX_BYTES];
    uint32_t prefix_have;
    uint32_t length; /* announced by the prefix */
    uint32_t have;   /* body bytes received */
    uint32_t messages;
    uint32_t max_length;
    uint8_t *body;
    uint8_t *inline_buf;
    uint32_t inline_cap;
    isn_grpc_memory_budget *budget; /* charged for a heap body; NULL = none */
} isn_grpc_reader;

void isn_grpc_reader_init(isn_grpc_reader *reader, uint8_t *inline_buf, uint32_t inline_cap, uint32_t max_length);
/* Heap bodies are charged to `budget` (kept across resets). */
void isn_grpc_reader_set_budget(isn_grpc_reader *reader, isn_grpc_memory_budget *budget);
/* Frees a heap body and starts over (max_length and budget kept). */
void isn_grpc_reader_reset(isn_grpc_reader *reader);
isn_grpc_read_result isn_grpc_reader_feed(isn_grpc_reader *reader, const uint8_t *data, size_t len);
/* The request stream ended: ISN_GRPC_READ_OK when exactly one whole message arrived. */
isn_grpc_read_result isn_grpc_reader_finish(const isn_grpc_reader *reader);
/* A sentence for the client about a failed result (names the sizes involved). */
void isn_grpc_reader_describe(const isn_grpc_reader *reader, isn_grpc_read_result result, char *out, size_t out_len);

/* grpc-timeout: 1 to 8 digits and a unit H, M, S, m, u or n. Returns 0 and nanoseconds, or -1. */
int isn_grpc_parse_timeout(const char *value, size_t len, uint64_t *ns);
/* The largest grpc-timeout value (8 digits), and room for a formatted header value with its NUL. */
#define ISN_GRPC_TIMEOUT_MAX_VALUE 99999999ull
#define ISN_GRPC_TIMEOUT_MAX_LEN 10
/* grpc-timeout for a timeout of ns nanoseconds, per the spec: at most 8 digits, in the finest unit
 * that holds them, rounded up (never a shorter deadline than asked). Writes a NUL-terminated value
 * (out_len >= ISN_GRPC_TIMEOUT_MAX_LEN) and returns its length. */
size_t isn_grpc_format_timeout(uint64_t ns, char *out, size_t out_len);

/* protobuf-c unpacks a `string` as a C string, so one holding a NUL byte would be silently cut
 * there. True when a string field of the message (or of one nested in it) holds a NUL, with the
 * field's dotted name ("global_stats.terms.term") in `field`. Walks the wire form of a message that
 * has already unpacked. */
bool isn_grpc_message_nul_string_field(const ProtobufCMessageDescriptor *descriptor, const uint8_t *data, size_t len,
                                   char *field, size_t field_len);

/* The value of a top-level varint field (bool, enum, integer) of a message's wire form: true with its
 * last occurrence in *value (as protobuf takes a scalar field sent twice), or with 0 when the field
 * is absent (proto3's default); false when the top level is not well formed or the field is not a
 * varint. Nested messages are skipped, not checked: for a reader that needs one flag of a large
 * reply, not the reply. */
bool isn_grpc_message_varint_field(const uint8_t *data, size_t len, uint32_t field_number, uint64_t *value);

/* grpc-message encoding: bytes outside printable ASCII, and '%', become %XX. Always NUL-terminates;
 * cuts at a whole escape when out is too small. Returns the length written. */
size_t isn_grpc_percent_encode(const char *in, char *out, size_t out_len);

/* ---- W3C trace context (grpc/trace.c) */
#define ISN_GRPC_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */
typedef struct {
    char trace_id[33]; /* 32 lowercase hex */
    char span_id[17];  /* 16 lowercase hex: the parent-id field */
    uint8_t flags;     /* 1 = sampled */
} isn_grpc_trace;
/* A valid traceparent (version 00, or a later version's first four fields). */
bool isn_grpc_trace_parse(const char *traceparent, isn_grpc_trace *trace);
/* The traceparent for a call made on behalf of `incoming` (NULL or invalid: a new trace): the same
 * trace id and flags, a new span id. *trace (may be NULL) gets what was sent. */
void isn_grpc_trace_child(const char *incoming, isn_grpc_trace *trace, char out[ISN_GRPC_TRACEPARENT_LEN + 1]);

/* The longest isn-via header (the aggregators a request went through) a server takes. */
#define ISN_GRPC_VIA_MAX 255

#endif
