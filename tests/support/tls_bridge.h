/* A plaintext-to-TLS bridge for tests: each connection to its loopback port is carried over TLS to a
 * target port, so that tests written for raw plaintext HTTP/2 or HTTP/1.1 (the attack suite) run
 * over TLS unchanged. It is OpenSSL's own blocking client, apart from grpc/'s TLS code, one thread
 * per connection, and it keeps back-pressure: it reads from one side only while it can write to the
 * other, so a test client that does not read stalls the TLS connection as it would a plain one. */
#ifndef ISN_TESTS_SUPPORT_TLS_BRIDGE_H
#define ISN_TESTS_SUPPORT_TLS_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tls_bridge tls_bridge;

/* Listens on 127.0.0.1 (its port in *port) and bridges to 127.0.0.1:target_port, verifying the
 * server against ca_file under the name "localhost" and offering ALPN `alpn` ("h2", "http/1.1").
 * NULL with the reason on stderr. */
tls_bridge *tls_bridge_start(int target_port, const char *ca_file, const char *alpn, int *port);
/* Stops accepting and frees the bridge; connections in progress end when either side closes. */
void tls_bridge_stop(tls_bridge *bridge);
/* The first bytes a TLS client sends (a ClientHello offering h2) into out; their count, or 0. */
size_t tls_bridge_client_hello(uint8_t *out, size_t cap);

#endif
