#include "tests/support/tls_bridge.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

struct tls_bridge {
    int listener;
    int target_port;
    SSL_CTX *ctx;
    unsigned char alpn[32];
    size_t alpn_len;
    pthread_t acceptor;
};

/* One bridged connection: what its thread needs, its own (so that the bridge may be stopped and freed
 * while connections still run), the context's reference included. */
typedef struct {
    SSL_CTX *ctx;
    int target_port;
    unsigned char alpn[32];
    size_t alpn_len;
    int plain;
} bridged;

static bool write_all(int fd, const uint8_t *data, size_t len) {
    while (len) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        data += n;
        len -= (size_t)n;
    }
    return true;
}

static int connect_target(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int small = 65536; /* before connect: the window is agreed then */
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* SSL_write on the non-blocking socket, waiting (back-pressure) while the server does not read. */
/* Forwards what the server sent that is there now (none: true at once); false once it is gone. */
static bool forward_ready(SSL *ssl, int fd, int plain) {
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (!SSL_pending(ssl) && poll(&pfd, 1, 0) != 1) return true;
        uint8_t in[1 << 14];
        int got = SSL_read(ssl, in, sizeof in);
        if (got > 0) {
            if (!write_all(plain, in, (size_t)got)) return false;
            continue;
        }
        int error = SSL_get_error(ssl, got);
        return error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE;
    }
}

static bool ssl_write_all(SSL *ssl, int fd, int plain, const uint8_t *data, size_t len) {
    while (len) {
        /* What the server sent first (a GOAWAY before it closes) goes through first: a server that
         * closes with our bytes unread resets the connection, and a write into the reset would end
         * the bridge before that answer was read. */
        if (!forward_ready(ssl, fd, plain)) return false;
        int n = SSL_write(ssl, data, (int)len);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
            continue;
        }
        int error = SSL_get_error(ssl, n);
        if (error != SSL_ERROR_WANT_WRITE && error != SSL_ERROR_WANT_READ) return false;
        /* While the server does not read, what it sends (a GOAWAY before it closes) is still taken:
         * a server that closes with its answer unread by us would reset the connection and lose it. */
        struct pollfd pfd = {.fd = fd, .events = POLLIN | (error == SSL_ERROR_WANT_WRITE ? POLLOUT : 0)};
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR) return false;
        if ((pfd.revents & POLLIN) && !(pfd.revents & POLLOUT)) {
            uint8_t in[1 << 14];
            int got = SSL_read(ssl, in, sizeof in);
            if (got > 0 && !write_all(plain, in, (size_t)got)) return false;
            if (got <= 0) {
                int read_error = SSL_get_error(ssl, got);
                if (read_error != SSL_ERROR_WANT_READ && read_error != SSL_ERROR_WANT_WRITE) return false;
            }
        }
    }
    return true;
}

static uint8_t *buf_drain(void) {
    static __thread uint8_t sink[4096];
    return sink;
}

static void *pump(void *arg) {
    bridged *b = arg;
    int tcp = connect_target(b->target_port);
    SSL *ssl = tcp >= 0 ? SSL_new(b->ctx) : NULL;
    if (ssl) {
        SSL_set_fd(ssl, tcp);
        SSL_set_tlsext_host_name(ssl, "localhost");
        SSL_set1_host(ssl, "localhost");
        SSL_set_alpn_protos(ssl, b->alpn, (unsigned)b->alpn_len);
    }
    if (ssl && SSL_connect(ssl) == 1) {
        /* From here the socket does not block: a read that finds only a session ticket must not wait
         * for data while the test client's bytes wait to go the other way. */
        fcntl(tcp, F_SETFL, fcntl(tcp, F_GETFL) | O_NONBLOCK);
        static __thread uint8_t buf[1 << 14];
        for (;;) {
            struct pollfd fds[2] = {{.fd = b->plain, .events = POLLIN}, {.fd = tcp, .events = POLLIN}};
            if (!SSL_pending(ssl) && poll(fds, 2, -1) < 0) {
                if (errno == EINTR) continue;
                break;
            }
            if (fds[0].revents) {
                ssize_t n = recv(b->plain, buf, sizeof buf, 0);
                if (n <= 0) break;
                if (!ssl_write_all(ssl, tcp, b->plain, buf, (size_t)n)) {
                    forward_ready(ssl, tcp, b->plain); /* what arrived before the reset, if OpenSSL still reads */
                    break;
                }
            }
            if (SSL_pending(ssl) || fds[1].revents) {
                int n = SSL_read(ssl, buf, sizeof buf);
                if (n <= 0) {
                    int error = SSL_get_error(ssl, n);
                    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) continue;
                    break;
                }
                if (!write_all(b->plain, buf, (size_t)n)) break;
            }
        }
    }
    ERR_clear_error();
    if (ssl) SSL_free(ssl);
    if (tcp >= 0) close(tcp);
    /* The test client may have sent more than was forwarded: closing with unread bytes would reset the
     * connection and lose what it has not read yet. */
    shutdown(b->plain, SHUT_WR);
    for (int waited = 0; waited < 100; waited++) { /* until the test client closes too (10 s at most) */
        struct pollfd pfd = {.fd = b->plain, .events = POLLIN};
        if (poll(&pfd, 1, 100) == 1 && recv(b->plain, buf_drain(), 4096, 0) <= 0) break;
    }
    close(b->plain);
    SSL_CTX_free(b->ctx);
    free(b);
    return NULL;
}

static void *accept_loop(void *arg) {
    tls_bridge *bridge = arg;
    for (;;) {
        int fd = accept4(bridge->listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return NULL; /* the listener was shut down */
        }
        int one = 1, small = 16384;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* Little buffered in the bridge: a test client that does not read stalls the server nearly as
         * soon as on a direct connection. */
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
        bridged *b = malloc(sizeof *b);
        pthread_t thread;
        if (!b) {
            close(fd);
            continue;
        }
        *b = (bridged){.ctx = bridge->ctx, .target_port = bridge->target_port, .alpn_len = bridge->alpn_len, .plain = fd};
        memcpy(b->alpn, bridge->alpn, sizeof b->alpn);
        SSL_CTX_up_ref(bridge->ctx);
        if (pthread_create(&thread, NULL, pump, b) != 0) {
            SSL_CTX_free(b->ctx);
            close(fd);
            free(b);
            continue;
        }
        pthread_detach(thread);
    }
}

tls_bridge *tls_bridge_start(int target_port, const char *ca_file, const char *alpn, int *port) {
    tls_bridge *bridge = calloc(1, sizeof *bridge);
    if (!bridge) return NULL;
    signal(SIGPIPE, SIG_IGN); /* OpenSSL writes to its socket with write(): a closed peer is an error, not a signal */
    bridge->target_port = target_port;
    bridge->alpn_len = strlen(alpn) + 1;
    bridge->alpn[0] = (unsigned char)strlen(alpn);
    memcpy(bridge->alpn + 1, alpn, strlen(alpn));
    bridge->ctx = SSL_CTX_new(TLS_client_method());
    if (!bridge->ctx || SSL_CTX_load_verify_locations(bridge->ctx, ca_file, NULL) != 1) {
        fprintf(stderr, "tls_bridge: cannot load the CA %s\n", ca_file);
        goto fail;
    }
    SSL_CTX_set_verify(bridge->ctx, SSL_VERIFY_PEER, NULL);
    bridge->listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bridge->listener < 0 || bind(bridge->listener, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        listen(bridge->listener, 256) != 0 || getsockname(bridge->listener, (struct sockaddr *)&addr, &len) != 0) {
        fprintf(stderr, "tls_bridge: cannot listen: %s\n", strerror(errno));
        goto fail;
    }
    *port = ntohs(addr.sin_port);
    if (pthread_create(&bridge->acceptor, NULL, accept_loop, bridge) != 0) goto fail;
    return bridge;
fail:
    if (bridge->listener > 0) close(bridge->listener);
    SSL_CTX_free(bridge->ctx);
    free(bridge);
    return NULL;
}

void tls_bridge_stop(tls_bridge *bridge) {
    if (!bridge) return;
    shutdown(bridge->listener, SHUT_RDWR);
    pthread_join(bridge->acceptor, NULL);
    close(bridge->listener);
    SSL_CTX_free(bridge->ctx); /* connections still running hold their own references */
    free(bridge);
}

size_t tls_bridge_client_hello(uint8_t *out, size_t cap) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = ctx ? SSL_new(ctx) : NULL;
    BIO *in = BIO_new(BIO_s_mem()), *sent = BIO_new(BIO_s_mem());
    size_t n = 0;
    if (ssl && in && sent) {
        SSL_set_bio(ssl, in, sent);
        in = sent = NULL;
        static const unsigned char h2[] = {2, 'h', '2'};
        SSL_set_alpn_protos(ssl, h2, sizeof h2);
        SSL_set_tlsext_host_name(ssl, "localhost");
        SSL_set_connect_state(ssl);
        SSL_do_handshake(ssl); /* wants the server's answer: the ClientHello is written */
        int got = BIO_read(SSL_get_wbio(ssl), out, (int)cap);
        n = got > 0 ? (size_t)got : 0;
    }
    BIO_free(in);
    BIO_free(sent);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return n;
}
