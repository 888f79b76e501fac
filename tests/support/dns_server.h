/* A tiny authoritative DNS server on loopback UDP for tests of DNS discovery: it answers A queries
 * from a table the test changes while it runs (a name with no address: an empty answer; a name not
 * in the table: NXDOMAIN; AAAA: an empty answer), on its own thread; over TCP too, on the same port,
 * for answers a UDP datagram cannot hold. */
#ifndef ISN_TESTS_SUPPORT_DNS_SERVER_H
#define ISN_TESTS_SUPPORT_DNS_SERVER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct dns_server dns_server;

/* Listens on 127.0.0.1, a free port. NULL on failure (the reason on stderr). */
dns_server *dns_server_start(void);
int dns_server_port(const dns_server *server);
/* The A records of `name` (no trailing dot): IPv4 addresses separated by commas ("" = none);
 * NULL removes the name. */
void dns_server_set(dns_server *server, const char *name, const char *ipv4_list);
/* `count` A records for `name`: first_ipv4 and the addresses after it (at most 4000). */
void dns_server_set_range(dns_server *server, const char *name, const char *first_ipv4, uint32_t count);
/* While set, every answer lists its records in a new random order (as round-robin servers do). */
void dns_server_shuffle(dns_server *server, bool shuffle);
/* While set, every query is answered SERVFAIL (a broken DNS server). */
void dns_server_fail(dns_server *server, bool fail);
uint64_t dns_server_queries(const dns_server *server);
void dns_server_stop(dns_server *server);

#endif
