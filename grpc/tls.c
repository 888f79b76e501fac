/* TLS credentials (loading, validation, rotation, the file watch, metrics) and the memory-BIO
 * sessions of grpc/'s transports. See grpc/tls.h and grpc/tls_internal.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "base/base.h"
#include "grpc/tls_internal.h"

#define TLS_WATCHED_FILES 3

typedef struct {
    uv_fs_poll_t poll;
    isn_grpc_tls *tls;
} file_watch;

struct isn_grpc_tls {
    bool server;
    /* The config's strings, owned. */
    char *cert_file, *key_file, *client_ca_file, *ca_file;
    char **allowed_peers;
    uint32_t num_allowed_peers;
    unsigned char alpn[16]; /* server: the protocol it agrees to, in ALPN's wire form (length, name) */
    pthread_mutex_t lock; /* guards current: SSL_new takes a reference to the context it is made from */
    SSL_CTX *current;
    isn_grpc_tls_counters counters;
    /* The watch (isn_grpc_tls_watch): one poll per file, and a short timer so that a certificate and
     * its key replaced one after the other are read together. */
    file_watch *watches[TLS_WATCHED_FILES];
    uv_timer_t *settle;
    uint32_t interval_ms;
};

static const char *const failure_names[ISN_GRPC_TLS_FAIL_COUNT] = {
    "no_client_certificate", "untrusted_certificate", "expired_certificate", "peer_not_allowed",
    "alpn_mismatch",         "not_tls",               "protocol",            "timeout",
};

const char *isn_grpc_tls_failure_name(isn_grpc_tls_failure reason) {
    return reason < ISN_GRPC_TLS_FAIL_COUNT ? failure_names[reason] : "unknown";
}

static void count(uint64_t *field) { __atomic_fetch_add(field, 1, __ATOMIC_RELAXED); }

/* OpenSSL's last error, as text for an operator ("PEM routines::no start line"). */
static void openssl_reason(char *out, size_t out_len) {
    unsigned long code = ERR_peek_last_error();
    if (!code) {
        snprintf(out, out_len, "unknown error");
        return;
    }
    const char *reason = ERR_reason_error_string(code);
    const char *lib = ERR_lib_error_string(code);
    snprintf(out, out_len, "%s%s%s", lib ? lib : "", lib ? ": " : "", reason ? reason : "unknown error");
    ERR_clear_error();
}

/* ------------------------------------------------------------------ peers allowed */

static bool peer_allowed(const isn_grpc_tls *tls, X509 *cert) {
    if (!tls->num_allowed_peers) return true;
    char common_name[256] = "";
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, common_name, sizeof common_name);
    GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
    bool allowed = false;
    for (uint32_t i = 0; i < tls->num_allowed_peers && !allowed; i++) {
        const char *want = tls->allowed_peers[i];
        if (common_name[0] && !strcmp(want, common_name)) allowed = true;
        for (int j = 0; names && j < sk_GENERAL_NAME_num(names) && !allowed; j++) {
            const GENERAL_NAME *name = sk_GENERAL_NAME_value(names, j);
            if (name->type != GEN_URI) continue;
            const ASN1_IA5STRING *uri = name->d.uniformResourceIdentifier;
            allowed = (size_t)uri->length == strlen(want) && !memcmp(uri->data, want, (size_t)uri->length);
        }
    }
    GENERAL_NAMES_free(names);
    return allowed;
}

/* The CA's verdict, then the allow-list on the peer's own certificate: refused in the handshake. */
static int verify_peer(int preverify_ok, X509_STORE_CTX *store) {
    if (!preverify_ok || X509_STORE_CTX_get_error_depth(store) != 0) return preverify_ok;
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    const isn_grpc_tls *tls = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    if (peer_allowed(tls, X509_STORE_CTX_get_current_cert(store))) return 1;
    X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION);
    return 0;
}

static int select_protocol(SSL *ssl, const unsigned char **out, unsigned char *out_len, const unsigned char *in,
                           unsigned int in_len, void *arg) {
    (void)ssl;
    const isn_grpc_tls *tls = arg;
    unsigned char *selected;
    if (SSL_select_next_proto(&selected, out_len, tls->alpn, 1u + tls->alpn[0], in, in_len) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
}

/* ------------------------------------------------------------------ credentials */

static int64_t not_after_unix(X509 *cert) {
    struct tm tm;
    if (!cert || !ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm)) return 0;
    return (int64_t)timegm(&tm);
}

/* A context from the files, every check done; NULL with err naming the file and the reason. */
static SSL_CTX *load_context(isn_grpc_tls *tls, int64_t *not_after, char *err, size_t err_len) {
    char why[200];
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(tls->server ? TLS_server_method() : TLS_client_method());
    if (!ctx) {
        isn_error(err, err_len, "cannot create a TLS context: out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* Renegotiation (TLS 1.2) would let a client make the server redo handshakes on one connection. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_app_data(ctx, tls);
    *not_after = 0;
    if (tls->cert_file) {
        if (SSL_CTX_use_certificate_chain_file(ctx, tls->cert_file) != 1) {
            openssl_reason(why, sizeof why);
            isn_error(err, err_len, "TLS certificate %s: %s", tls->cert_file, why);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, tls->key_file, SSL_FILETYPE_PEM) != 1) {
            if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
                ERR_clear_error();
                isn_error(err, err_len, "TLS key %s does not belong to the certificate %s", tls->key_file, tls->cert_file);
                goto fail;
            }
            openssl_reason(why, sizeof why);
            isn_error(err, err_len, "TLS key %s: %s", tls->key_file, why);
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            ERR_clear_error();
            isn_error(err, err_len, "TLS key %s does not belong to the certificate %s", tls->key_file, tls->cert_file);
            goto fail;
        }
        X509 *cert = SSL_CTX_get0_certificate(ctx);
        if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
            isn_error(err, err_len, "TLS certificate %s expired (not valid after %lld, unix time)", tls->cert_file,
                      (long long)not_after_unix(cert));
            goto fail;
        }
        *not_after = not_after_unix(cert);
    }
    const char *ca = tls->server ? tls->client_ca_file : tls->ca_file;
    if (ca) {
        if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
            openssl_reason(why, sizeof why);
            isn_error(err, err_len, "TLS CA file %s: %s", ca, why);
            goto fail;
        }
    } else if (!tls->server) {
        SSL_CTX_set_default_verify_paths(ctx);
    }
    if (tls->server) {
        SSL_CTX_set_alpn_select_cb(ctx, select_protocol, tls);
        if (tls->client_ca_file) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(tls->client_ca_file);
            if (names) SSL_CTX_set_client_CA_list(ctx, names);
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_peer);
        }
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    ERR_clear_error();
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

static char *copy_path(const char *path) { return path && path[0] ? strdup(path) : NULL; }

static void tls_free_config(isn_grpc_tls *tls) {
    free(tls->cert_file);
    free(tls->key_file);
    free(tls->client_ca_file);
    free(tls->ca_file);
    for (uint32_t i = 0; i < tls->num_allowed_peers; i++) free(tls->allowed_peers[i]);
    free(tls->allowed_peers);
}

static int parse_allowed_peers(isn_grpc_tls *tls, const char *list, char *err, size_t err_len) {
    if (!list || !list[0]) return 0;
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        const char *end = p;
        while (*end && *end != ',') end++;
        size_t len = (size_t)(end - p);
        while (len && p[len - 1] == ' ') len--;
        char **grown = realloc(tls->allowed_peers, (tls->num_allowed_peers + 1) * sizeof *grown);
        if (!grown) return isn_error(err, err_len, "out of memory");
        tls->allowed_peers = grown;
        if (!(tls->allowed_peers[tls->num_allowed_peers] = strndup(p, len))) return isn_error(err, err_len, "out of memory");
        tls->num_allowed_peers++;
        p = end;
    }
    return 0;
}

static isn_grpc_tls *tls_new(bool server, const isn_grpc_tls_config *config, char *err, size_t err_len) {
    isn_grpc_tls *tls = calloc(1, sizeof *tls);
    if (!tls) {
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    tls->server = server;
    tls->cert_file = copy_path(config->cert_file);
    tls->key_file = copy_path(config->key_file);
    tls->client_ca_file = server ? copy_path(config->client_ca_file) : NULL;
    tls->ca_file = server ? NULL : copy_path(config->ca_file);
    pthread_mutex_init(&tls->lock, NULL);
    const char *alpn = config->alpn ? config->alpn : "h2";
    size_t alpn_len = strlen(alpn);
    int rc = 0;
    if (alpn_len == 0 || alpn_len >= sizeof tls->alpn)
        rc = isn_error(err, err_len, "TLS: ALPN protocol name \"%s\" is empty or too long", alpn);
    else if (!tls->cert_file != !tls->key_file)
        rc = isn_error(err, err_len, "TLS needs both a certificate and a key (%s given alone)",
                       tls->cert_file ? "certificate" : "key");
    else if (server && !tls->cert_file)
        rc = isn_error(err, err_len, "a TLS server needs a certificate and a key");
    else if (config->allowed_peers && config->allowed_peers[0] && !tls->client_ca_file)
        rc = isn_error(err, err_len, "allowed TLS peers are checked only with client certificates (set the client CA)");
    else
        rc = parse_allowed_peers(tls, server ? config->allowed_peers : NULL, err, err_len);
    if (rc == 0) {
        tls->alpn[0] = (unsigned char)alpn_len;
        memcpy(tls->alpn + 1, alpn, alpn_len);
    }
    if (rc == 0 && !(tls->current = load_context(tls, &tls->counters.cert_not_after, err, err_len))) rc = -1;
    if (rc != 0) {
        isn_grpc_tls_free(tls);
        return NULL;
    }
    return tls;
}

isn_grpc_tls *isn_grpc_tls_server_new(const isn_grpc_tls_config *config, char *err, size_t err_len) {
    return tls_new(true, config, err, err_len);
}

isn_grpc_tls *isn_grpc_tls_client_new(const isn_grpc_tls_config *config, char *err, size_t err_len) {
    return tls_new(false, config, err, err_len);
}

int isn_grpc_tls_reload(isn_grpc_tls *tls, char *err, size_t err_len) {
    int64_t not_after;
    SSL_CTX *fresh = load_context(tls, &not_after, err, err_len);
    if (!fresh) {
        count(&tls->counters.reloads_refused);
        return -1;
    }
    pthread_mutex_lock(&tls->lock);
    SSL_CTX *old = tls->current;
    tls->current = fresh;
    pthread_mutex_unlock(&tls->lock);
    SSL_CTX_free(old); /* open connections hold their own references */
    __atomic_store_n(&tls->counters.cert_not_after, not_after, __ATOMIC_RELAXED);
    count(&tls->counters.reloads);
    return 0;
}

isn_grpc_tls_counters isn_grpc_tls_read_counters(const isn_grpc_tls *tls) {
    isn_grpc_tls_counters out;
    out.handshakes = __atomic_load_n(&tls->counters.handshakes, __ATOMIC_RELAXED);
    for (int i = 0; i < ISN_GRPC_TLS_FAIL_COUNT; i++)
        out.handshake_failures[i] = __atomic_load_n(&tls->counters.handshake_failures[i], __ATOMIC_RELAXED);
    out.reloads = __atomic_load_n(&tls->counters.reloads, __ATOMIC_RELAXED);
    out.reloads_refused = __atomic_load_n(&tls->counters.reloads_refused, __ATOMIC_RELAXED);
    out.cert_not_after = __atomic_load_n(&tls->counters.cert_not_after, __ATOMIC_RELAXED);
    return out;
}

void isn_grpc_tls_render_metrics(const char *prefix, const isn_grpc_tls *grpc, const isn_grpc_tls *stats,
                                 byte_buffer *out) {
    const isn_grpc_tls *sets[2] = {grpc, stats};
    const char *ports[2] = {"grpc", "stats"};
    isn_grpc_tls_counters c[2];
    bool any = false, any_cert = false;
    for (int i = 0; i < 2; i++)
        if (sets[i]) {
            c[i] = isn_grpc_tls_read_counters(sets[i]);
            any = true;
            any_cert |= c[i].cert_not_after != 0;
        }
    if (!any) return;
    if (any_cert) {
        /* isnd's isn_tls_cert_expiry_timestamp_seconds, isn-agg's isn_agg_tls_cert_expiry_timestamp_seconds;
         * likewise isn_tls_cert_reloads_total and isn_agg_tls_cert_reloads_total below */
        buffer_printf(out, "# HELP %s_tls_cert_expiry_timestamp_seconds When the certificate in use expires.\n", prefix);
        buffer_printf(out, "# TYPE %s_tls_cert_expiry_timestamp_seconds gauge\n", prefix);
        for (int i = 0; i < 2; i++)
            if (sets[i] && c[i].cert_not_after)
                buffer_printf(out, "%s_tls_cert_expiry_timestamp_seconds{port=\"%s\"} %lld\n", prefix, ports[i],
                              (long long)c[i].cert_not_after);
    }
    buffer_printf(out, "# HELP %s_tls_handshakes_total TLS handshakes completed.\n", prefix);
    buffer_printf(out, "# TYPE %s_tls_handshakes_total counter\n", prefix);
    for (int i = 0; i < 2; i++)
        if (sets[i])
            buffer_printf(out, "%s_tls_handshakes_total{port=\"%s\"} %llu\n", prefix, ports[i],
                          (unsigned long long)c[i].handshakes);
    buffer_printf(out, "# HELP %s_tls_handshake_failures_total TLS handshakes refused or failed, by reason.\n", prefix);
    buffer_printf(out, "# TYPE %s_tls_handshake_failures_total counter\n", prefix);
    for (int i = 0; i < 2; i++)
        for (int r = 0; sets[i] && r < ISN_GRPC_TLS_FAIL_COUNT; r++)
            buffer_printf(out, "%s_tls_handshake_failures_total{port=\"%s\",reason=\"%s\"} %llu\n", prefix, ports[i],
                          failure_names[r], (unsigned long long)c[i].handshake_failures[r]);
    buffer_printf(out, "# HELP %s_tls_cert_reloads_total Certificate reloads: taken, or refused (the old set kept).\n",
                  prefix);
    buffer_printf(out, "# TYPE %s_tls_cert_reloads_total counter\n", prefix);
    for (int i = 0; i < 2; i++)
        if (sets[i]) {
            buffer_printf(out, "%s_tls_cert_reloads_total{port=\"%s\",result=\"ok\"} %llu\n", prefix, ports[i],
                          (unsigned long long)c[i].reloads);
            buffer_printf(out, "%s_tls_cert_reloads_total{port=\"%s\",result=\"refused\"} %llu\n", prefix, ports[i],
                          (unsigned long long)c[i].reloads_refused);
        }
}

/* ------------------------------------------------------------------ the file watch */

static void on_settled(uv_timer_t *timer) {
    isn_grpc_tls *tls = timer->data;
    char err[400];
    if (isn_grpc_tls_reload(tls, err, sizeof err) == 0)
        log_info("TLS: new certificate from %s in use for new connections", tls->cert_file ? tls->cert_file : tls->ca_file);
    else
        log_warn("TLS: refused the changed files (%s); the certificate in use stays", err);
}

static void on_file_changed(uv_fs_poll_t *poll, int status, const uv_stat_t *prev, const uv_stat_t *curr) {
    (void)status;
    (void)prev;
    (void)curr;
    file_watch *watch = poll->data;
    isn_grpc_tls *tls = watch->tls;
    /* A missing file (status < 0) is a change too: the reload says what is wrong with it. Each file has
     * its own poll, out of phase with the others by up to an interval: waiting one interval after the
     * latest change reads a certificate and its key swapped together in one reload (after half an
     * interval, the second file's poll could land after the first reload and load the same files again,
     * counting two reloads for one change). */
    uv_timer_start(tls->settle, on_settled, tls->interval_ms + 1, 0);
}

int isn_grpc_tls_watch(isn_grpc_tls *tls, uv_loop_t *loop, uint32_t interval_ms, char *err, size_t err_len) {
    if (tls->settle) return isn_error(err, err_len, "the TLS files are watched already");
    tls->interval_ms = interval_ms ? interval_ms : 1000;
    if (!(tls->settle = calloc(1, sizeof *tls->settle))) return isn_error(err, err_len, "out of memory");
    uv_timer_init(loop, tls->settle);
    tls->settle->data = tls;
    uv_unref((uv_handle_t *)tls->settle);
    const char *files[TLS_WATCHED_FILES] = {tls->cert_file, tls->key_file,
                                            tls->server ? tls->client_ca_file : tls->ca_file};
    for (int i = 0; i < TLS_WATCHED_FILES; i++) {
        if (!files[i]) continue;
        file_watch *watch = calloc(1, sizeof *watch);
        if (!watch) return isn_error(err, err_len, "out of memory");
        uv_fs_poll_init(loop, &watch->poll);
        watch->poll.data = watch;
        watch->tls = tls;
        tls->watches[i] = watch;
        int rc = uv_fs_poll_start(&watch->poll, on_file_changed, files[i], tls->interval_ms);
        if (rc < 0) return isn_error(err, err_len, "cannot watch %s: %s", files[i], uv_strerror(rc));
        uv_unref((uv_handle_t *)&watch->poll); /* the watch alone does not keep a loop running */
    }
    return 0;
}

static void free_watch(uv_handle_t *handle) { free(handle->data); }
static void free_handle(uv_handle_t *handle) { free(handle); }

void isn_grpc_tls_unwatch(isn_grpc_tls *tls) {
    for (int i = 0; i < TLS_WATCHED_FILES; i++) {
        if (!tls->watches[i]) continue;
        uv_fs_poll_stop(&tls->watches[i]->poll);
        uv_close((uv_handle_t *)&tls->watches[i]->poll, free_watch);
        tls->watches[i] = NULL;
    }
    if (tls->settle) {
        uv_close((uv_handle_t *)tls->settle, free_handle);
        tls->settle = NULL;
    }
}

void isn_grpc_tls_free(isn_grpc_tls *tls) {
    if (!tls) return;
    SSL_CTX_free(tls->current);
    pthread_mutex_destroy(&tls->lock);
    tls_free_config(tls);
    free(tls);
}

/* ------------------------------------------------------------------ sessions */

static int session_new(tls_session *session, isn_grpc_tls *tls) {
    memset(session, 0, sizeof *session);
    pthread_mutex_lock(&tls->lock);
    session->ssl = SSL_new(tls->current);
    pthread_mutex_unlock(&tls->lock);
    session->network_in = BIO_new(BIO_s_mem());
    session->network_out = BIO_new(BIO_s_mem());
    if (!session->ssl || !session->network_in || !session->network_out) {
        BIO_free(session->network_in);
        BIO_free(session->network_out);
        SSL_free(session->ssl);
        memset(session, 0, sizeof *session);
        return -1;
    }
    /* A read of an empty input BIO means "more to come", not end of file. */
    BIO_set_mem_eof_return(session->network_in, -1);
    SSL_set_bio(session->ssl, session->network_in, session->network_out);
    session->tls = tls;
    return 0;
}

int tls_session_accept(tls_session *session, isn_grpc_tls *tls) {
    if (session_new(session, tls) < 0) return -1;
    SSL_set_accept_state(session->ssl);
    return 0;
}

int tls_session_connect(tls_session *session, isn_grpc_tls *tls, const char *server_name, char *err, size_t err_len) {
    if (session_new(session, tls) < 0) return isn_error(err, err_len, "out of memory for a TLS session");
    SSL_set_connect_state(session->ssl);
    static const unsigned char h2[] = {2, 'h', '2'};
    SSL_set_alpn_protos(session->ssl, h2, sizeof h2);
    unsigned char address[16];
    bool is_ip = inet_pton(AF_INET, server_name, address) == 1 || inet_pton(AF_INET6, server_name, address) == 1;
    int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(session->ssl), server_name)
                   : SSL_set_tlsext_host_name(session->ssl, server_name) && SSL_set1_host(session->ssl, server_name);
    if (!ok) {
        tls_session_free(session);
        return isn_error(err, err_len, "TLS server name %s cannot be checked", server_name);
    }
    return 0;
}

void tls_session_free(tls_session *session) {
    if (session->ssl) SSL_free(session->ssl); /* frees both BIOs */
    memset(session, 0, sizeof *session);
}

bool tls_session_feed(tls_session *session, const uint8_t *data, size_t len) {
    while (len) {
        int n = BIO_write(session->network_in, data, len > INT32_MAX ? INT32_MAX : (int)len);
        if (n <= 0) return false;
        data += n;
        len -= (size_t)n;
    }
    return true;
}

static isn_grpc_tls_failure classify_failure(tls_session *session, unsigned long code) {
    long verify = SSL_get_verify_result(session->ssl);
    int reason = ERR_GET_REASON(code);
    if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) return ISN_GRPC_TLS_FAIL_NO_CLIENT_CERTIFICATE;
    if (verify == X509_V_ERR_APPLICATION_VERIFICATION) return ISN_GRPC_TLS_FAIL_PEER_NOT_ALLOWED;
    if (verify == X509_V_ERR_CERT_HAS_EXPIRED || verify == X509_V_ERR_CERT_NOT_YET_VALID)
        return ISN_GRPC_TLS_FAIL_EXPIRED_CERTIFICATE;
    if (verify != X509_V_OK || reason == SSL_R_CERTIFICATE_VERIFY_FAILED) return ISN_GRPC_TLS_FAIL_UNTRUSTED_CERTIFICATE;
    if (reason == SSL_R_NO_APPLICATION_PROTOCOL) return ISN_GRPC_TLS_FAIL_ALPN_MISMATCH;
    if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_HTTP_REQUEST || reason == SSL_R_HTTPS_PROXY_REQUEST ||
        reason == SSL_R_UNKNOWN_PROTOCOL || reason == SSL_R_RECORD_LENGTH_MISMATCH || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
        reason == SSL_R_UNEXPECTED_MESSAGE || reason == SSL_R_LENGTH_MISMATCH || reason == SSL_R_BAD_PACKET_LENGTH ||
        reason == SSL_R_ENCRYPTED_LENGTH_TOO_LONG || reason == SSL_R_UNEXPECTED_RECORD)
        return ISN_GRPC_TLS_FAIL_NOT_TLS;
    return ISN_GRPC_TLS_FAIL_PROTOCOL;
}

static void session_failed(tls_session *session, bool in_handshake) {
    unsigned long code = ERR_peek_last_error();
    if (in_handshake) {
        isn_grpc_tls_failure why = classify_failure(session, code);
        count(&session->tls->counters.handshake_failures[why]);
        long verify = SSL_get_verify_result(session->ssl);
        if (verify != X509_V_OK)
            snprintf(session->error, sizeof session->error, "TLS handshake refused (%s): %s", failure_names[why],
                     X509_verify_cert_error_string(verify));
        else
            snprintf(session->error, sizeof session->error, "TLS handshake failed (%s): %s", failure_names[why],
                     code ? ERR_reason_error_string(code) ? ERR_reason_error_string(code) : "unknown" : "no detail");
    } else {
        snprintf(session->error, sizeof session->error, "TLS error: %s",
                 code && ERR_reason_error_string(code) ? ERR_reason_error_string(code) : "connection broken");
    }
    ERR_clear_error();
    session->failed = true;
}

ssize_t tls_session_read(tls_session *session, uint8_t *buf, size_t cap) {
    if (session->failed || session->closed) return -1;
    if (!session->handshake_done) {
        int rc = SSL_do_handshake(session->ssl);
        if (rc != 1) {
            int error = SSL_get_error(session->ssl, rc);
            if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) return 0;
            session_failed(session, true);
            return -1;
        }
        session->handshake_done = true;
        count(&session->tls->counters.handshakes);
    }
    int n = SSL_read(session->ssl, buf, cap > INT32_MAX ? INT32_MAX : (int)cap);
    if (n > 0) return n;
    int error = SSL_get_error(session->ssl, n);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) return 0;
    if (error == SSL_ERROR_ZERO_RETURN) {
        session->closed = true;
        snprintf(session->error, sizeof session->error, "peer closed the TLS session");
        return -1;
    }
    session_failed(session, false);
    return -1;
}

bool tls_session_write(tls_session *session, const uint8_t *data, size_t len) {
    if (session->failed || !session->handshake_done) return false;
    while (len) {
        int n = SSL_write(session->ssl, data, len > INT32_MAX ? INT32_MAX : (int)len);
        if (n <= 0) {
            session_failed(session, false);
            return false;
        }
        data += n;
        len -= (size_t)n;
    }
    return true;
}

size_t tls_session_input_pending(const tls_session *session) {
    return session->ssl ? BIO_ctrl_pending(session->network_in) : 0;
}

size_t tls_session_output_pending(const tls_session *session) {
    return session->ssl ? BIO_ctrl_pending(session->network_out) : 0;
}

size_t tls_session_read_output(tls_session *session, uint8_t *out, size_t cap) {
    int n = cap ? BIO_read(session->network_out, out, cap > INT32_MAX ? INT32_MAX : (int)cap) : 0;
    return n > 0 ? (size_t)n : 0;
}

bool tls_session_take_output(tls_session *session, byte_buffer *out) {
    size_t pending = tls_session_output_pending(session);
    if (!pending) return true;
    if (!buffer_reserve(out, pending)) return false;
    int n = BIO_read(session->network_out, out->data + out->len, (int)pending);
    if (n > 0) out->len += (size_t)n;
    return true;
}

void tls_session_count_timeout(tls_session *session) {
    if (session->ssl && !session->handshake_done && !session->failed)
        count(&session->tls->counters.handshake_failures[ISN_GRPC_TLS_FAIL_TIMEOUT]);
}
