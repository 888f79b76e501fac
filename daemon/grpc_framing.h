/* gRPC over HTTP/2, the parts that are not HTTP/2: the 5-byte message prefix (compressed flag,
 * big-endian length), status codes, the grpc-timeout header and grpc-message percent-encoding.
 * Pure functions and a byte-at-a-time reader, so they are unit-tested without sockets. */
#ifndef ISN_DAEMON_GRPC_FRAMING_H
#define ISN_DAEMON_GRPC_FRAMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRPC_PREFIX_BYTES 5

typedef enum {
    GRPC_STATUS_OK = 0,
    GRPC_STATUS_CANCELLED = 1,
    GRPC_STATUS_UNKNOWN = 2,
    GRPC_STATUS_INVALID_ARGUMENT = 3,
    GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    GRPC_STATUS_NOT_FOUND = 5,
    GRPC_STATUS_ALREADY_EXISTS = 6,
    GRPC_STATUS_PERMISSION_DENIED = 7,
    GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    GRPC_STATUS_FAILED_PRECONDITION = 9,
    GRPC_STATUS_ABORTED = 10,
    GRPC_STATUS_OUT_OF_RANGE = 11,
    GRPC_STATUS_UNIMPLEMENTED = 12,
    GRPC_STATUS_INTERNAL = 13,
    GRPC_STATUS_UNAVAILABLE = 14,
    GRPC_STATUS_DATA_LOSS = 15,
    GRPC_STATUS_UNAUTHENTICATED = 16,
    GRPC_STATUS_COUNT
} grpc_status;

/* "OK", "INVALID_ARGUMENT", ... ("UNKNOWN" for codes out of range). */
const char *grpc_status_name(int status);

/* Writes the prefix of an uncompressed message of `length` bytes. */
void grpc_write_prefix(uint8_t out[GRPC_PREFIX_BYTES], uint32_t length);

typedef enum {
    GRPC_READ_OK = 0,            /* consumed; more may follow */
    GRPC_READ_TOO_LARGE,         /* the prefix announces more than max_length */
    GRPC_READ_COMPRESSED,        /* compressed flag set: no compression is supported */
    GRPC_READ_BAD_FLAGS,         /* flag byte other than 0 or 1 */
    GRPC_READ_EXTRA_MESSAGE,     /* a second message on a unary call */
    GRPC_READ_OUT_OF_MEMORY,
    GRPC_READ_TRUNCATED,         /* (finish) stream ended inside a prefix or a body */
    GRPC_READ_NO_MESSAGE,        /* (finish) stream ended before any message */
} grpc_read_result;

/* Reassembles the one message of a unary request from DATA chunks of any size. Bodies up to
 * `inline_cap` bytes land in caller-provided storage; larger ones in one malloc of exactly their
 * length (bounded by max_length), released by grpc_reader_reset. */
typedef struct {
    uint8_t prefix[GRPC_PREFIX_BYTES];
    uint32_t prefix_have;
    uint32_t length; /* announced by the prefix */
    uint32_t have;   /* body bytes received */
    uint32_t messages;
    uint32_t max_length;
    uint8_t *body;
    uint8_t *inline_buf;
    uint32_t inline_cap;
} grpc_reader;

void grpc_reader_init(grpc_reader *reader, uint8_t *inline_buf, uint32_t inline_cap, uint32_t max_length);
/* Frees a heap body and starts over (max_length kept). */
void grpc_reader_reset(grpc_reader *reader);
grpc_read_result grpc_reader_feed(grpc_reader *reader, const uint8_t *data, size_t len);
/* The request stream ended: GRPC_READ_OK when exactly one whole message arrived. */
grpc_read_result grpc_reader_finish(const grpc_reader *reader);
/* A sentence for the client about a failed result (names the sizes involved). */
void grpc_reader_describe(const grpc_reader *reader, grpc_read_result result, char *out, size_t out_len);

/* grpc-timeout: 1 to 8 digits and a unit H, M, S, m, u or n. Returns 0 and nanoseconds, or -1. */
int grpc_parse_timeout(const char *value, size_t len, uint64_t *ns);

/* grpc-message encoding: bytes outside printable ASCII, and '%', become %XX. Always NUL-terminates;
 * cuts at a whole escape when out is too small. Returns the length written. */
size_t grpc_percent_encode(const char *in, char *out, size_t out_len);

#endif
