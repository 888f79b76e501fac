/* One TLS connection's state for grpc/'s transports (server_conn.c, stats_http.c, client.c): an
 * OpenSSL SSL whose network side is two memory BIOs, so the transport moves ciphertext with its own
 * reads and writes (libuv, or poll) and never lets OpenSSL touch a socket. */
#ifndef ISN_GRPC_TLS_INTERNAL_H
#define ISN_GRPC_TLS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/ssl.h>

#include "base/base.h"
#include "grpc/tls.h"

/* What one TLS connection is charged against a server's memory budget: the SSL object, its record
 * buffers while in use (SSL_MODE_RELEASE_BUFFERS frees them when idle) and at most one partial record
 * waiting in the input BIO. */
#define TLS_CONN_BYTES (48 * 1024)
/* Plaintext is taken from OpenSSL in pieces of at most one record. */
#define TLS_RECORD_MAX 16384

typedef struct {
    SSL *ssl;         /* NULL: plaintext */
    BIO *network_in;  /* ciphertext from the peer, for OpenSSL to read */
    BIO *network_out; /* ciphertext OpenSSL wrote, for the transport to send */
    isn_grpc_tls *tls;
    bool handshake_done;
    bool failed;      /* a fatal TLS error: send what is queued (the alert) and close */
    bool closed;      /* the peer sent close_notify */
    char error[160];  /* why it failed */
} tls_session;

/* A server-side session with the credentials in use now. -1 when out of memory. */
int tls_session_accept(tls_session *session, isn_grpc_tls *tls);
/* A client-side session: SNI and certificate name check against server_name (a host name or an IP
 * address), ALPN h2. -1 with err. */
int tls_session_connect(tls_session *session, isn_grpc_tls *tls, const char *server_name, char *err, size_t err_len);
void tls_session_free(tls_session *session);
/* Ciphertext that came from the network. False when out of memory. */
bool tls_session_feed(tls_session *session, const uint8_t *data, size_t len);
/* Moves the handshake on, then decrypts: bytes of plaintext (at most cap), 0 when more input is
 * needed, -1 when the session failed (failed or closed set; a failed handshake is counted by reason
 * on the credentials). */
ssize_t tls_session_read(tls_session *session, uint8_t *buf, size_t cap);
/* Encrypts plaintext (after the handshake). False on failure. */
bool tls_session_write(tls_session *session, const uint8_t *data, size_t len);
/* Ciphertext from the network not yet decrypted (its reader had no room for the plaintext). */
size_t tls_session_input_pending(const tls_session *session);
/* Ciphertext waiting to be sent. */
size_t tls_session_output_pending(const tls_session *session);
/* Moves up to cap bytes of the ciphertext waiting to be sent into out; the count. */
size_t tls_session_read_output(tls_session *session, uint8_t *out, size_t cap);
/* Appends the ciphertext waiting to be sent to `out`. False when out of memory. */
bool tls_session_take_output(tls_session *session, byte_buffer *out);
/* Counts a handshake that did not finish within the header timeout. */
void tls_session_count_timeout(tls_session *session);

#endif
