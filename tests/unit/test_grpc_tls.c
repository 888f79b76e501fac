/* grpc/tls.c without sockets: credentials refused with a reason that names the file (no key, a key of
 * another certificate, not PEM, expired, an allow-list without client certificates); a reload taken
 * for new sessions only, a corrupt one refused with the old set serving; handshakes between
 * memory-BIO sessions: mutual TLS with the allow-list by common name and by URI SAN, refusals counted
 * under their reasons, ALPN; the metrics families. Certificates are made by
 * tests/support/tls_certs.sh (openssl) in a temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "grpc/tls_internal.h"

static char dir[64] = "/tmp/isn-test-tls-XXXXXX";
static char path_buf[8][256];
static int path_next;

static const char *path(const char *name) {
    char *out = path_buf[path_next++ % 8];
    snprintf(out, 256, "%s/%s", dir, name);
    return out;
}

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    char command[300];
    snprintf(command, sizeof command, "ROTATIONS=1 bash tests/support/tls_certs.sh '%s'", dir);
    return system(command) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    return system(command) == 0 ? 0 : -1;
}

static uint64_t failures(const isn_grpc_tls *tls, isn_grpc_tls_failure reason) {
    return isn_grpc_tls_read_counters(tls).handshake_failures[reason];
}

/* Moves each side's output to the other until both are done or one failed. */
static bool handshake(tls_session *client, tls_session *server) {
    uint8_t buf[TLS_RECORD_MAX];
    for (int round = 0; round < 10; round++) {
        bool client_ok = tls_session_read(client, buf, sizeof buf) >= 0;
        byte_buffer wire = {0};
        assert_true(tls_session_take_output(client, &wire));
        assert_true(tls_session_feed(server, wire.data, wire.len));
        wire.len = 0;
        bool server_ok = tls_session_read(server, buf, sizeof buf) >= 0;
        assert_true(tls_session_take_output(server, &wire));
        assert_true(tls_session_feed(client, wire.data, wire.len));
        buffer_free(&wire);
        if (!client_ok || !server_ok) return false;
        if (client->handshake_done && server->handshake_done) {
            /* TLS 1.3: the server judges the client's certificate after the client thinks it is done */
            return tls_session_read(client, buf, sizeof buf) >= 0 && tls_session_read(server, buf, sizeof buf) >= 0;
        }
    }
    return false;
}

static void test_refused_credentials(void **state) {
    (void)state;
    char err[400];
    isn_grpc_tls_config config = {.cert_file = path("server.crt")};
    assert_null(isn_grpc_tls_server_new(&config, err, sizeof err));
    assert_non_null(strstr(err, "both a certificate and a key"));

    config = (isn_grpc_tls_config){.cert_file = path("server.crt"), .key_file = path("client.key")};
    assert_null(isn_grpc_tls_server_new(&config, err, sizeof err));
    assert_non_null(strstr(err, "does not belong to the certificate"));
    assert_non_null(strstr(err, "client.key"));

    config = (isn_grpc_tls_config){.cert_file = path("server.key"), .key_file = path("server.key")};
    assert_null(isn_grpc_tls_server_new(&config, err, sizeof err));
    assert_non_null(strstr(err, "TLS certificate"));
    assert_non_null(strstr(err, "server.key"));

    config = (isn_grpc_tls_config){.cert_file = path("expired.crt"), .key_file = path("expired.key")};
    assert_null(isn_grpc_tls_server_new(&config, err, sizeof err));
    assert_non_null(strstr(err, "expired"));

    config = (isn_grpc_tls_config){.cert_file = path("server.crt"), .key_file = path("server.key"),
                                   .allowed_peers = "isn-agg"};
    assert_null(isn_grpc_tls_server_new(&config, err, sizeof err));
    assert_non_null(strstr(err, "client certificates"));

    config = (isn_grpc_tls_config){.cert_file = path("server.crt"), .key_file = path("server.key"),
                                   .client_ca_file = path("no-such-ca.crt")};
    assert_null(isn_grpc_tls_server_new(&config, err, sizeof err));
    assert_non_null(strstr(err, "no-such-ca.crt"));
}

/* The serial of the certificate a new session presents. */
static long served_serial(isn_grpc_tls *server_tls, isn_grpc_tls *client_tls) {
    tls_session client, server;
    char err[200];
    assert_int_equal(tls_session_accept(&server, server_tls), 0);
    assert_int_equal(tls_session_connect(&client, client_tls, "localhost", err, sizeof err), 0);
    assert_true(handshake(&client, &server));
    X509 *cert = SSL_get1_peer_certificate(client.ssl);
    long serial = ASN1_INTEGER_get(X509_get0_serialNumber(cert));
    X509_free(cert);
    tls_session_free(&client);
    tls_session_free(&server);
    return serial;
}

static void test_reload(void **state) {
    (void)state;
    char err[400], command[600];
    snprintf(command, sizeof command, "cp '%s' '%s' && cp '%s' '%s'", path("server.crt"), path("live.crt"),
             path("server.key"), path("live.key"));
    assert_int_equal(system(command), 0);
    isn_grpc_tls_config config = {.cert_file = path("live.crt"), .key_file = path("live.key")};
    isn_grpc_tls *server_tls = isn_grpc_tls_server_new(&config, err, sizeof err);
    isn_grpc_tls_config client_config = {.ca_file = path("ca.crt")};
    isn_grpc_tls *client_tls = isn_grpc_tls_client_new(&client_config, err, sizeof err);
    assert_non_null(server_tls);
    assert_non_null(client_tls);
    assert_int_equal(served_serial(server_tls, client_tls), 10);

    /* a session begun before the reload keeps the old certificate */
    tls_session early;
    assert_int_equal(tls_session_accept(&early, server_tls), 0);
    snprintf(command, sizeof command, "cp '%s' '%s' && cp '%s' '%s'", path("rotated-1.crt"), path("live.crt"),
             path("rotated-1.key"), path("live.key"));
    assert_int_equal(system(command), 0);
    assert_int_equal(isn_grpc_tls_reload(server_tls, err, sizeof err), 0);
    assert_int_equal(served_serial(server_tls, client_tls), 101);
    tls_session client;
    assert_int_equal(tls_session_connect(&client, client_tls, "localhost", err, sizeof err), 0);
    assert_true(handshake(&client, &early));
    X509 *cert = SSL_get1_peer_certificate(client.ssl);
    assert_int_equal(ASN1_INTEGER_get(X509_get0_serialNumber(cert)), 10);
    X509_free(cert);
    tls_session_free(&client);
    tls_session_free(&early);

    /* corrupt: refused with the file named, the last good one serves on */
    FILE *f = fopen(path("live.crt"), "w");
    assert_non_null(f);
    fputs("-----BEGIN CERTIFICATE-----\nnot base64\n", f);
    fclose(f);
    assert_int_equal(isn_grpc_tls_reload(server_tls, err, sizeof err), -1);
    assert_non_null(strstr(err, "live.crt"));
    assert_int_equal(served_serial(server_tls, client_tls), 101);
    isn_grpc_tls_counters c = isn_grpc_tls_read_counters(server_tls);
    assert_int_equal(c.reloads, 1);
    assert_int_equal(c.reloads_refused, 1);
    assert_true(c.cert_not_after > 0);
    isn_grpc_tls_free(server_tls);
    isn_grpc_tls_free(client_tls);
}

/* A client with `cert` against a mutual-TLS server that allows `allowed`: served, or refused under `reason`. */
static void mutual(const char *allowed, const char *cert, const char *key, bool served, isn_grpc_tls_failure reason) {
    char err[400];
    isn_grpc_tls_config config = {.cert_file = path("server.crt"), .key_file = path("server.key"),
                                  .client_ca_file = path("ca.crt"), .allowed_peers = allowed};
    isn_grpc_tls *server_tls = isn_grpc_tls_server_new(&config, err, sizeof err);
    isn_grpc_tls_config client_config = {.ca_file = path("ca.crt"), .cert_file = cert ? path(cert) : NULL,
                                         .key_file = key ? path(key) : NULL};
    isn_grpc_tls *client_tls = isn_grpc_tls_client_new(&client_config, err, sizeof err);
    assert_non_null(server_tls);
    assert_non_null(client_tls);
    tls_session client, server;
    assert_int_equal(tls_session_accept(&server, server_tls), 0);
    assert_int_equal(tls_session_connect(&client, client_tls, "localhost", err, sizeof err), 0);
    bool done = handshake(&client, &server);
    if (done != served) fail_msg("allowed \"%s\", client %s: %s, server says %s", allowed ? allowed : "", cert ? cert : "none",
                                 served ? "refused" : "served", server.error);
    for (int r = 0; r < ISN_GRPC_TLS_FAIL_COUNT; r++)
        assert_int_equal(failures(server_tls, (isn_grpc_tls_failure)r), !served && r == (int)reason ? 1 : 0);
    assert_int_equal(isn_grpc_tls_read_counters(server_tls).handshakes, served ? 1 : 0);
    tls_session_free(&client);
    tls_session_free(&server);
    isn_grpc_tls_free(server_tls);
    isn_grpc_tls_free(client_tls);
}

static void test_mutual_tls(void **state) {
    (void)state;
    mutual(NULL, "client.crt", "client.key", true, 0);
    mutual("isn-query", "client.crt", "client.key", true, 0);                       /* common name */
    mutual("other, spiffe://isn.test/isn-query", "client.crt", "client.key", true, 0); /* URI SAN */
    mutual("spiffe://isn.test/isn-agg", "client.crt", "client.key", false, ISN_GRPC_TLS_FAIL_PEER_NOT_ALLOWED);
    mutual("isn-query-x", "client.crt", "client.key", false, ISN_GRPC_TLS_FAIL_PEER_NOT_ALLOWED); /* exact, not a prefix */
    mutual(NULL, NULL, NULL, false, ISN_GRPC_TLS_FAIL_NO_CLIENT_CERTIFICATE);
    mutual(NULL, "stranger.crt", "stranger.key", false, ISN_GRPC_TLS_FAIL_UNTRUSTED_CERTIFICATE);
}

/* The server's name is checked by the client; a client that offers ALPN without h2 is refused. */
static void test_names_and_alpn(void **state) {
    (void)state;
    char err[400];
    isn_grpc_tls_config config = {.cert_file = path("server.crt"), .key_file = path("server.key")};
    isn_grpc_tls *server_tls = isn_grpc_tls_server_new(&config, err, sizeof err);
    isn_grpc_tls_config client_config = {.ca_file = path("ca.crt")};
    isn_grpc_tls *client_tls = isn_grpc_tls_client_new(&client_config, err, sizeof err);
    assert_non_null(server_tls);
    assert_non_null(client_tls);
    tls_session client, server;
    const char *names[] = {"localhost", "127.0.0.1", "isn.example", "10.0.0.1"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tls_session_accept(&server, server_tls), 0);
        assert_int_equal(tls_session_connect(&client, client_tls, names[i], err, sizeof err), 0);
        bool done = handshake(&client, &server);
        assert_int_equal(done, i < 2); /* the certificate names localhost and 127.0.0.1 only */
        if (!done) assert_non_null(strstr(client.error, "untrusted_certificate"));
        tls_session_free(&client);
        tls_session_free(&server);
    }
    assert_int_equal(tls_session_accept(&server, server_tls), 0);
    assert_int_equal(tls_session_connect(&client, client_tls, "localhost", err, sizeof err), 0);
    static const unsigned char http1[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_set_alpn_protos(client.ssl, http1, sizeof http1);
    assert_false(handshake(&client, &server));
    assert_int_equal(failures(server_tls, ISN_GRPC_TLS_FAIL_ALPN_MISMATCH), 1);
    tls_session_free(&client);
    tls_session_free(&server);

    byte_buffer metrics = {0};
    isn_grpc_tls_render_metrics("isn", server_tls, NULL, &metrics);
    assert_true(buffer_append(&metrics, "", 1));
    const char *text = (const char *)metrics.data;
    assert_non_null(strstr(text, "isn_tls_cert_expiry_timestamp_seconds{port=\"grpc\"} "));
    assert_non_null(strstr(text, "isn_tls_handshakes_total{port=\"grpc\"} 2\n"));
    assert_non_null(strstr(text, "isn_tls_handshake_failures_total{port=\"grpc\",reason=\"alpn_mismatch\"} 1\n"));
    assert_null(strstr(text, "port=\"stats\""));
    /* one HELP line per family */
    const char *first = strstr(text, "# HELP isn_tls_handshakes_total");
    assert_non_null(first);
    assert_null(strstr(first + 1, "# HELP isn_tls_handshakes_total"));
    buffer_free(&metrics);
    isn_grpc_tls_free(server_tls);
    isn_grpc_tls_free(client_tls);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_credentials),
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_mutual_tls),
        cmocka_unit_test(test_names_and_alpn),
    };
    return cmocka_run_group_tests_name("grpc_tls", tests, setup, teardown);
}
