/* The TLS record path of grpc/ (grpc/tls.c's memory-BIO sessions, as the server, the stats endpoint
 * and the client use them), fed hostile bytes. The first input byte picks what the rest is:
 *   0: a client's first bytes to a server session (ClientHello parsing, garbage, records of any
 *      length), in pieces whose sizes the input gives;
 *   1: the rest flips bits of the client's handshake records on their way to a mutual-TLS server;
 *   2: after a real handshake, the rest is sent as application data and must arrive unchanged,
 *      then as raw records (forged, truncated, a renegotiation's ClientHello) after it.
 * Each input must end with the server session either served or failed with a reason, every failure
 * counted once, and no more output pending than a handshake's flight. The certificate is a fixed
 * self-signed one (valid for a century) written to a temporary directory at start. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc/tls_internal.h"

static const char CERT_PEM[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBlDCCATugAwIBAgIUPzF2vUdwVI2CRFhdjH92aoH5PgkwCgYIKoZIzj0EAwIw\n"
    "FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEyOTA1Mzg0MloYDzIxMjYxMTA1\n"
    "MDUzODQyWjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO\n"
    "PQMBBwNCAAREBOfFUFOIdhA945Mw2tQU3pSvyppA0JEPlZsF5i6/BL2rmjgsKN6m\n"
    "hxdxsyExjSB09kudceDqD9DqivUtaMR1o2kwZzAdBgNVHQ4EFgQUudLg1Gw9B29I\n"
    "ia7GhvcVCq29bTUwHwYDVR0jBBgwFoAUudLg1Gw9B29Iia7GhvcVCq29bTUwDwYD\n"
    "VR0TAQH/BAUwAwEB/zAUBgNVHREEDTALgglsb2NhbGhvc3QwCgYIKoZIzj0EAwID\n"
    "RwAwRAIgSeSp4GfyCJuGOFpYF+T4D77zoRLMcNZHyTMqOWTnFIQCIDKN67omQcAH\n"
    "JEFOy0EQ9QidIL+D8yMCmn+E57wqJgH/\n"
    "-----END CERTIFICATE-----\n";
static const char KEY_PEM[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgkSlnncgXgG1GCa13\n"
    "mEp5k9pIMdM1//s14mmLPRHfzK+hRANCAAREBOfFUFOIdhA945Mw2tQU3pSvyppA\n"
    "0JEPlZsF5i6/BL2rmjgsKN6mhxdxsyExjSB09kudceDqD9DqivUtaMR1\n"
    "-----END PRIVATE KEY-----\n";

static isn_grpc_tls *server_tls, *mutual_tls, *client_tls;

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char dir[] = "/tmp/isn-fuzz-tls-XXXXXX", cert[64], key[64], err[400];
    if (!mkdtemp(dir)) abort();
    snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    write_file(cert, CERT_PEM);
    write_file(key, KEY_PEM);
    isn_grpc_tls_config server = {.cert_file = cert, .key_file = key};
    isn_grpc_tls_config mutual = {.cert_file = cert, .key_file = key, .client_ca_file = cert, .allowed_peers = "localhost"};
    isn_grpc_tls_config client = {.cert_file = cert, .key_file = key, .ca_file = cert};
    if (!(server_tls = isn_grpc_tls_server_new(&server, err, sizeof err)) ||
        !(mutual_tls = isn_grpc_tls_server_new(&mutual, err, sizeof err)) ||
        !(client_tls = isn_grpc_tls_client_new(&client, err, sizeof err))) {
        fprintf(stderr, "fuzz_tls_record: %s\n", err);
        abort();
    }
    unlink(cert);
    unlink(key);
    rmdir(dir);
    return 0;
}

static uint64_t failures_of(const isn_grpc_tls *tls) {
    isn_grpc_tls_counters c = isn_grpc_tls_read_counters(tls);
    uint64_t sum = 0;
    for (int i = 0; i < ISN_GRPC_TLS_FAIL_COUNT; i++) sum += c.handshake_failures[i];
    return sum;
}

/* Decrypts everything the server session holds; false once it failed or ended. */
static bool drain(tls_session *session, byte_buffer *plain) {
    uint8_t buf[TLS_RECORD_MAX];
    for (;;) {
        ssize_t n = tls_session_read(session, buf, sizeof buf);
        if (n < 0) {
            if (!session->failed && !session->closed) abort(); /* -1 always says why */
            return false;
        }
        if (n == 0) return true;
        if (plain && !buffer_append(plain, buf, (size_t)n)) abort();
    }
}

/* Moves what `from` wrote into `to`, XORed with the mask bytes while they last. */
static void shuttle(tls_session *from, tls_session *to, const uint8_t **mask, size_t *mask_len) {
    byte_buffer wire = {0};
    if (!tls_session_take_output(from, &wire)) abort();
    for (size_t i = 0; i < wire.len && mask && *mask_len; i++, (*mask)++, (*mask_len)--) wire.data[i] ^= **mask;
    if (wire.len && !tls_session_feed(to, wire.data, wire.len)) abort();
    buffer_free(&wire);
}

/* Runs a handshake between a client session and `server` in memory; true when both finished. */
static bool handshake(tls_session *client, tls_session *server, const uint8_t **mask, size_t *mask_len) {
    for (int round = 0; round < 8; round++) {
        bool client_alive = drain(client, NULL);
        shuttle(client, server, mask, mask_len);
        bool server_alive = drain(server, NULL);
        shuttle(server, client, NULL, NULL);
        if (!client_alive || !server_alive) return false;
        if (client->handshake_done && server->handshake_done) return drain(client, NULL);
    }
    return false;
}

static void client_hello_bytes(const uint8_t *data, size_t size) {
    tls_session server;
    if (tls_session_accept(&server, server_tls) < 0) abort();
    uint64_t before = failures_of(server_tls);
    bool alive = true;
    while (size && alive) {
        size_t piece = 1 + data[0] % 64;
        data++, size--;
        if (piece > size) piece = size;
        if (!tls_session_feed(&server, data, piece)) abort();
        data += piece, size -= piece;
        alive = drain(&server, NULL);
        if (tls_session_output_pending(&server) > 64 * 1024) abort(); /* one flight, not a flood */
        byte_buffer out = {0};
        if (!tls_session_take_output(&server, &out)) abort();
        buffer_free(&out);
    }
    /* A handshake that failed is counted once, under one reason; one that did not fail is not. */
    if (failures_of(server_tls) != before + (server.failed && !server.handshake_done ? 1 : 0)) abort();
    tls_session_free(&server);
}

static void tampered_handshake(const uint8_t *data, size_t size) {
    tls_session client, server;
    char err[200];
    if (tls_session_accept(&server, mutual_tls) < 0 ||
        tls_session_connect(&client, client_tls, "localhost", err, sizeof err) < 0)
        abort();
    uint64_t before = failures_of(mutual_tls);
    bool done = handshake(&client, &server, &data, &size);
    if (done && failures_of(mutual_tls) != before) abort();
    if (server.failed && !server.handshake_done && failures_of(mutual_tls) != before + 1) abort();
    tls_session_free(&client);
    tls_session_free(&server);
}

static void records_after_handshake(const uint8_t *data, size_t size) {
    tls_session client, server;
    char err[200];
    if (tls_session_accept(&server, server_tls) < 0 ||
        tls_session_connect(&client, client_tls, "localhost", err, sizeof err) < 0)
        abort();
    if (!handshake(&client, &server, NULL, NULL)) abort(); /* untampered: must succeed */
    size_t half = size / 2;
    byte_buffer plain = {0};
    if (half) {
        if (!tls_session_write(&client, data, half)) abort();
        shuttle(&client, &server, NULL, NULL);
        if (!drain(&server, &plain)) abort();
        if (plain.len != half || memcmp(plain.data, data, half)) abort(); /* what was sent arrives */
    }
    if (!tls_session_feed(&server, data + half, size - half)) abort();
    drain(&server, &plain);
    buffer_free(&plain);
    tls_session_free(&client);
    tls_session_free(&server);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: client_hello_bytes(data + 1, size - 1); break;
    case 1: tampered_handshake(data + 1, size - 1); break;
    default: records_after_handshake(data + 1, size - 1); break;
    }
    return 0;
}
