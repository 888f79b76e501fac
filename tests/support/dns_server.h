/* A tiny authoritative DNS server on loopback UDP for tests of DNS discovery: it answers A queries
 * from a table the test changes while it runs (a name with no address: an empty answer; a name not
 * in the table: NXDOMAIN; AAAA: an empty answer), on its own thread. */
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
/* While set, every query is answered SERVFAIL (a broken DNS server). */
void dns_server_fail(dns_server *server, bool fail);
uint64_t dns_server_queries(const dns_server *server);
void dns_server_stop(dns_server *server);

#endif
