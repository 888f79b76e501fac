/* See dns_server.h. Only what a resolver's A/AAAA question needs: one question, no compression in
 * it, answers pointing back at it; records live 1 s. An answer longer than 512 bytes goes over UDP
 * truncated (TC, no records), and whole over TCP on the same port, as a resolver then asks. */
#include "tests/support/dns_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define DNS_MAX_NAMES 16
#define DNS_MAX_ADDRESSES 4000 /* what one TCP answer (64 KiB) holds */
#define DNS_UDP_MAX 512
#define DNS_TCP_MAX 65535
#define DNS_MAX_CONNECTIONS 8

typedef struct {
    char name[256];
    struct in_addr addresses[DNS_MAX_ADDRESSES];
    int num_addresses;
    bool used;
} dns_entry;

struct dns_server {
    int fd, tcp_fd, port;
    int connections[DNS_MAX_CONNECTIONS];
    int num_connections;
    bool shuffle;
    uint64_t rng;
    pthread_t thread;
    pthread_mutex_t lock;
    dns_entry entries[DNS_MAX_NAMES];
    bool failing, stop;
    uint64_t queries;
};

/* The question's name as "a.b.c"; the offset just past it, or 0 when malformed. */
static size_t read_name(const uint8_t *msg, size_t len, size_t at, char *name, size_t cap) {
    size_t n = 0;
    while (at < len) {
        uint8_t label = msg[at++];
        if (!label) {
            if (!n && cap) name[0] = '\0';
            return at;
        }
        if (label > 63 || at + label > len || n + label + 2 > cap) return 0;
        if (n) name[n++] = '.';
        memcpy(name + n, msg + at, label);
        n += label;
        name[n] = '\0';
        at += label;
    }
    return 0;
}

static uint32_t next_random(dns_server *s, uint32_t bound) {
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) % bound);
}

static size_t answer(dns_server *s, const uint8_t *q, size_t len, uint8_t *out, size_t cap) {
    char name[256];
    size_t end = len >= 12 ? read_name(q, len, 12, name, sizeof name) : 0;
    if (!end || end + 4 > len || cap < end + 4) return 0;
    uint16_t qtype = (uint16_t)(q[end] << 8 | q[end + 1]);
    end += 4;
    size_t n = name[0] ? strlen(name) : 0;
    if (n && name[n - 1] == '.') name[n - 1] = '\0';
    memcpy(out, q, end); /* header and question */
    uint16_t flags = 0x8000 | 0x0400 | (uint16_t)(q[2] << 8 & 0x0100) | 0x0080; /* answer, authoritative, RD, RA */
    uint16_t count = 0;
    size_t at = end;
    pthread_mutex_lock(&s->lock);
    s->queries++;
    const dns_entry *e = NULL;
    for (int i = 0; i < DNS_MAX_NAMES && !e; i++)
        if (s->entries[i].used && !strcasecmp(s->entries[i].name, name)) e = &s->entries[i];
    if (s->failing) flags |= 2; /* SERVFAIL */
    else if (!e) flags |= 3;    /* NXDOMAIN */
    else if (qtype == 1 && at + 16 * (size_t)e->num_addresses > cap)
        flags |= 0x0200; /* TC: ask again over TCP */
    else if (qtype == 1) {
        static uint32_t order[DNS_MAX_ADDRESSES]; /* the server's thread only */
        for (int i = 0; i < e->num_addresses; i++) order[i] = (uint32_t)i;
        for (int i = e->num_addresses - 1; s->shuffle && i > 0; i--) {
            uint32_t j = next_random(s, (uint32_t)i + 1), swap = order[i];
            order[i] = order[j], order[j] = swap;
        }
        for (int i = 0; i < e->num_addresses; i++, count++) {
            static const uint8_t head[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4}; /* name -> question, A, IN, TTL 1 s */
            memcpy(out + at, head, sizeof head);
            memcpy(out + at + sizeof head, &e->addresses[order[i]], 4);
            at += 16;
        }
    }
    pthread_mutex_unlock(&s->lock);
    out[2] = (uint8_t)(flags >> 8), out[3] = (uint8_t)flags;
    out[6] = (uint8_t)(count >> 8), out[7] = (uint8_t)count;
    memset(out + 8, 0, 4); /* no authority, no additional records (an EDNS option in the question is dropped) */
    return at;
}

/* One query over TCP (2-byte length, then the message) answered the same way; false once the
 * connection is done. */
static bool serve_tcp(dns_server *s, int fd) {
    static uint8_t query[DNS_TCP_MAX], reply[DNS_TCP_MAX + 2]; /* the server's thread only */
    uint8_t prefix[2];
    if (recv(fd, prefix, 2, MSG_WAITALL) != 2) return false;
    size_t len = (size_t)prefix[0] << 8 | prefix[1];
    if (!len || recv(fd, query, len, MSG_WAITALL) != (ssize_t)len) return false;
    size_t n = answer(s, query, len, reply + 2, DNS_TCP_MAX);
    if (!n) return false;
    reply[0] = (uint8_t)(n >> 8), reply[1] = (uint8_t)n;
    return send(fd, reply, n + 2, MSG_NOSIGNAL) == (ssize_t)(n + 2);
}

static void *serve(void *arg) {
    dns_server *s = arg;
    uint8_t query[1500], reply[DNS_UDP_MAX];
    for (;;) {
        pthread_mutex_lock(&s->lock);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->lock);
        if (stop) return NULL;
        struct pollfd p[2 + DNS_MAX_CONNECTIONS] = {{.fd = s->fd, .events = POLLIN}, {.fd = s->tcp_fd, .events = POLLIN}};
        for (int i = 0; i < s->num_connections; i++) p[2 + i] = (struct pollfd){.fd = s->connections[i], .events = POLLIN};
        if (poll(p, 2 + (nfds_t)s->num_connections, 50) <= 0) continue;
        for (int i = s->num_connections - 1; i >= 0; i--)
            if (p[2 + i].revents && !serve_tcp(s, s->connections[i])) {
                close(s->connections[i]);
                s->connections[i] = s->connections[--s->num_connections];
            }
        if (p[1].revents & POLLIN) {
            int fd = accept(s->tcp_fd, NULL, NULL);
            if (fd >= 0 && s->num_connections < DNS_MAX_CONNECTIONS) s->connections[s->num_connections++] = fd;
            else if (fd >= 0) close(fd);
        }
        if (!(p[0].revents & POLLIN)) continue;
        struct sockaddr_storage from;
        socklen_t from_len = sizeof from;
        ssize_t len = recvfrom(s->fd, query, sizeof query, 0, (struct sockaddr *)&from, &from_len);
        if (len <= 0) continue;
        size_t n = answer(s, query, (size_t)len, reply, sizeof reply);
        if (n) sendto(s->fd, reply, n, 0, (struct sockaddr *)&from, from_len);
    }
}

/* A TCP listener on the UDP socket's port; false when that port is taken for TCP. */
static bool listen_tcp(dns_server *s) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                               .sin_port = htons((uint16_t)s->port)};
    s->tcp_fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    if (s->tcp_fd >= 0) setsockopt(s->tcp_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (s->tcp_fd < 0 || bind(s->tcp_fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(s->tcp_fd, 8) != 0) {
        if (s->tcp_fd >= 0) close(s->tcp_fd);
        s->tcp_fd = -1;
        return false;
    }
    return true;
}

dns_server *dns_server_start(void) {
    dns_server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->rng = 1;
    for (int tries = 0; tries < 20; tries++) {
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t addr_len = sizeof addr;
        s->fd = socket(AF_INET, SOCK_DGRAM, 0);
        if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
            getsockname(s->fd, (struct sockaddr *)&addr, &addr_len) != 0) {
            perror("dns_server: socket");
            if (s->fd >= 0) close(s->fd);
            free(s);
            return NULL;
        }
        s->port = ntohs(addr.sin_port);
        if (listen_tcp(s)) break;
        close(s->fd); /* that port is taken for TCP: another one */
        s->fd = -1;
    }
    if (s->fd < 0) {
        fprintf(stderr, "dns_server: no port free for both UDP and TCP\n");
        free(s);
        return NULL;
    }
    if (pthread_create(&s->thread, NULL, serve, s) != 0) {
        close(s->fd);
        close(s->tcp_fd);
        free(s);
        return NULL;
    }
    return s;
}

int dns_server_port(const dns_server *s) { return s->port; }

void dns_server_set(dns_server *s, const char *name, const char *ipv4_list) {
    pthread_mutex_lock(&s->lock);
    dns_entry *e = NULL, *free_entry = NULL;
    for (int i = 0; i < DNS_MAX_NAMES; i++) {
        if (s->entries[i].used && !strcasecmp(s->entries[i].name, name)) e = &s->entries[i];
        else if (!s->entries[i].used && !free_entry) free_entry = &s->entries[i];
    }
    if (!ipv4_list) {
        if (e) e->used = false;
    } else if ((e = e ? e : free_entry)) {
        memset(e, 0, sizeof *e);
        e->used = true;
        snprintf(e->name, sizeof e->name, "%s", name);
        char copy[4096], *save = NULL;
        snprintf(copy, sizeof copy, "%s", ipv4_list);
        for (char *t = strtok_r(copy, ",", &save); t && e->num_addresses < DNS_MAX_ADDRESSES; t = strtok_r(NULL, ",", &save))
            if (inet_pton(AF_INET, t, &e->addresses[e->num_addresses]) == 1) e->num_addresses++;
    }
    pthread_mutex_unlock(&s->lock);
}

void dns_server_set_range(dns_server *s, const char *name, const char *first_ipv4, uint32_t count) {
    struct in_addr first;
    if (inet_pton(AF_INET, first_ipv4, &first) != 1) return;
    dns_server_set(s, name, "");
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < DNS_MAX_NAMES; i++) {
        dns_entry *e = &s->entries[i];
        if (!e->used || strcasecmp(e->name, name)) continue;
        for (uint32_t j = 0; j < count && e->num_addresses < DNS_MAX_ADDRESSES; j++)
            e->addresses[e->num_addresses++].s_addr = htonl(ntohl(first.s_addr) + j);
    }
    pthread_mutex_unlock(&s->lock);
}

void dns_server_shuffle(dns_server *s, bool shuffle) {
    pthread_mutex_lock(&s->lock);
    s->shuffle = shuffle;
    pthread_mutex_unlock(&s->lock);
}

void dns_server_fail(dns_server *s, bool fail) {
    pthread_mutex_lock(&s->lock);
    s->failing = fail;
    pthread_mutex_unlock(&s->lock);
}

uint64_t dns_server_queries(const dns_server *s) {
    pthread_mutex_lock((pthread_mutex_t *)&s->lock);
    uint64_t n = s->queries;
    pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
    return n;
}

void dns_server_stop(dns_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    close(s->fd);
    close(s->tcp_fd);
    for (int i = 0; i < s->num_connections; i++) close(s->connections[i]);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
