/* A raw HTTP/2 client for attacks: frames, HPACK literals and Search requests written by hand, so that a
 * test or a benchmark can do what no well-behaved client does (never read, advertise a window of 0,
 * reset streams early, send oversized header lists). */
#ifndef ISN_TESTS_SUPPORT_RAW_HTTP2_H
#define ISN_TESTS_SUPPORT_RAW_HTTP2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { FRAME_DATA = 0, FRAME_HEADERS = 1, FRAME_RST_STREAM = 3, FRAME_SETTINGS = 4, FRAME_PING = 6, FRAME_GOAWAY = 7 };
enum { FLAG_END_STREAM = 1, FLAG_ACK = 1, FLAG_END_HEADERS = 4 };
enum { SETTINGS_INITIAL_WINDOW_SIZE = 4 };

/* One frame (9-byte header, then len bytes of payload) into out; the bytes written. */
size_t raw_h2_frame(uint8_t *out, int type, int flags, uint32_t stream, const void *payload, size_t len);
/* Sends all of data (no SIGPIPE); false once the peer is gone. */
bool raw_h2_send_all(int fd, const void *data, size_t len);
/* A Search request's header block into out; `pad` bytes (at most 64 KiB) of an extra header when asked. */
size_t raw_h2_request_headers(uint8_t *out, size_t pad);
/* A GET request's header block (answered HTTP 405 at once) with `pad` bytes (at most 4 KiB) of an
 * extra header sent for incremental indexing: the server's HPACK decoder keeps it in its dynamic table. */
size_t raw_h2_get_headers_indexed(uint8_t *out, size_t pad);
/* A framed SearchRequest {query, k, stored_fields: field when not NULL} into out (query and field under
 * 128 bytes each). */
size_t raw_h2_search_message(uint8_t *out, const char *query, uint32_t k, const char *field);
/* One whole Search request on `stream` (HEADERS, then DATA with END_STREAM) into out (under 1 KiB). */
size_t raw_h2_search_request(uint8_t *out, uint32_t stream, const char *query, uint32_t k, const char *field);
/* A frame read back from the server. */
typedef struct {
    int type, flags;
    uint32_t stream;
    uint32_t len;
    uint8_t payload[1 << 14];
} raw_h2_frame_in;

/* Reads one frame (0), or -1 on EOF or error (or a frame larger than 16 KiB), -2 on timeout. */
int raw_h2_read_frame(int fd, raw_h2_frame_in *f, int timeout_ms);

/* Connects to 127.0.0.1:port, sends the preface and SETTINGS (these entries, id and value pairs, at most
 * 10); the socket, or -1. */
int raw_h2_connect(int port, const uint32_t *settings, int num_settings);

#endif
