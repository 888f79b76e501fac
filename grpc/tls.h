/* TLS (1.3 and 1.2, OpenSSL) for every port of grpc/: the gRPC server, the stats endpoint and the
 * client. Records go through memory BIOs, so a loop never blocks on a socket inside OpenSSL; the
 * server offers ALPN "h2" and refuses a client that offers only other protocols.
 *
 * An isn_grpc_tls is a set of credentials read from files, shared by every loop of a program (its
 * fields are read under a lock or atomically). Reloading rereads the files and, when they make a
 * valid set, new connections use it; connections already open keep the one they began with. Files
 * that do not make a valid set (unreadable, not PEM, a key that does not match the certificate, an
 * expired certificate) are refused with the reason and the set in use stays. */
#ifndef ISN_GRPC_TLS_H
#define ISN_GRPC_TLS_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "base/base.h"

typedef struct isn_grpc_tls isn_grpc_tls;

typedef struct {
    /* Server: the certificate chain and key it presents (both required). Client: a certificate for
     * mutual TLS (both or neither). PEM files. */
    const char *cert_file;
    const char *key_file;
    /* Server: set = clients must present a certificate signed by this CA (PEM bundle), checked in
     * the handshake. */
    const char *client_ca_file;
    /* Server with client_ca_file: the peers let in, comma-separated; each is a subject common name
     * or a URI subject alternative name (SPIFFE: "spiffe://cluster/ns/isn/sa/isn-agg"), compared
     * exactly. NULL or "" = any certificate the CA signed. */
    const char *allowed_peers;
    /* Client: the CA the server's certificate must chain to (NULL = the system's store). */
    const char *ca_file;
    /* Server: the one ALPN protocol it agrees to: "h2" (NULL: gRPC) or "http/1.1" (the stats
     * endpoint). A client that offers ALPN without it is refused; one that offers none is served. */
    const char *alpn;
} isn_grpc_tls_config;

/* Why handshakes failed (isn_grpc_tls_counters.handshake_failures), as /metrics names them. */
typedef enum {
    ISN_GRPC_TLS_FAIL_NO_CLIENT_CERTIFICATE = 0, /* mutual TLS and the client sent none */
    ISN_GRPC_TLS_FAIL_UNTRUSTED_CERTIFICATE,     /* the peer's certificate does not chain to the CA */
    ISN_GRPC_TLS_FAIL_EXPIRED_CERTIFICATE,       /* or not yet valid */
    ISN_GRPC_TLS_FAIL_PEER_NOT_ALLOWED,          /* signed by the CA, but not on allowed_peers */
    ISN_GRPC_TLS_FAIL_ALPN_MISMATCH,             /* ALPN offered without the port's protocol ("h2") */
    ISN_GRPC_TLS_FAIL_NOT_TLS,                   /* the first bytes were not a TLS ClientHello */
    ISN_GRPC_TLS_FAIL_PROTOCOL,                  /* any other TLS error (version, ciphers, alerts) */
    ISN_GRPC_TLS_FAIL_TIMEOUT,                   /* not done within the header timeout (slow handshake) */
    ISN_GRPC_TLS_FAIL_COUNT
} isn_grpc_tls_failure;

/* "no_client_certificate", "untrusted_certificate", ... */
const char *isn_grpc_tls_failure_name(isn_grpc_tls_failure reason);

typedef struct {
    uint64_t handshakes;                                   /* completed */
    uint64_t handshake_failures[ISN_GRPC_TLS_FAIL_COUNT];
    uint64_t reloads;                                      /* new credentials taken */
    uint64_t reloads_refused;                              /* files that did not make a valid set */
    int64_t cert_not_after;                                /* expiry of the certificate in use (unix s); 0 = none */
} isn_grpc_tls_counters;

/* Server credentials (cert_file and key_file required). NULL with err naming the file and what is wrong. */
isn_grpc_tls *isn_grpc_tls_server_new(const isn_grpc_tls_config *config, char *err, size_t err_len);
/* Client credentials: ca_file to verify servers by, cert_file/key_file for mutual TLS. */
isn_grpc_tls *isn_grpc_tls_client_new(const isn_grpc_tls_config *config, char *err, size_t err_len);
/* Rereads the files of the config it was made with. 0 when the new set is in use for new
 * connections; -1 with err (the reason) when it was refused and the old set stays. Any thread. */
int isn_grpc_tls_reload(isn_grpc_tls *tls, char *err, size_t err_len);
/* Reloads whenever one of its files changes (checked every interval_ms; a Kubernetes Secret's files
 * change through a symlink swap, which a stat that follows links sees). Outcomes are logged. One
 * watch per credentials; on the loop of the caller. -1 with err. */
int isn_grpc_tls_watch(isn_grpc_tls *tls, uv_loop_t *loop, uint32_t interval_ms, char *err, size_t err_len);
/* Stops the watch (its handles close with the loop's next turn). */
void isn_grpc_tls_unwatch(isn_grpc_tls *tls);
/* After every server and client using it is freed. NULL is fine. */
void isn_grpc_tls_free(isn_grpc_tls *tls);
/* A snapshot (each field read atomically). */
isn_grpc_tls_counters isn_grpc_tls_read_counters(const isn_grpc_tls *tls);
/* PREFIX_tls_cert_expiry_timestamp_seconds, PREFIX_tls_handshakes_total,
 * PREFIX_tls_handshake_failures_total{reason} and PREFIX_tls_cert_reloads_total{result}, each with
 * port="grpc" for `grpc` and port="stats" for `stats` (either may be NULL: plaintext; nothing at all
 * when both are). */
void isn_grpc_tls_render_metrics(const char *prefix, const isn_grpc_tls *grpc, const isn_grpc_tls *stats,
                                 byte_buffer *out);

#endif
