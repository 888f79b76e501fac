/* A small single-threaded gRPC server (HTTP/2 with nghttp2 over plain sockets) for isn-agg: the
 * caller owns the poll() loop, adds the server's descriptors to it and hands back the events.
 * Unary calls only; no protobuf types here. Self-contained (linked into every tool). */
#ifndef ISN_TOOLS_AGG_SERVER_H
#define ISN_TOOLS_AGG_SERVER_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct agg_server agg_server;
typedef struct agg_rpc agg_rpc;

/* Called once per request whose body has fully arrived. The handler (now or later) must answer
 * every rpc exactly once with agg_rpc_reply or agg_rpc_fail, which also release it. */
typedef void (*agg_rpc_handler)(void *user, agg_rpc *rpc);

/* Listens on HOST:PORT (port 0 = any free port). NULL with err. */
agg_server *agg_server_new(const char *listen_address, uint32_t max_message_bytes, agg_rpc_handler handler,
                           void *user, char *err, size_t err_len);
void agg_server_free(agg_server *server);
int agg_server_port(const agg_server *server);
/* Stops accepting; open connections get GOAWAY. */
void agg_server_stop_accepting(agg_server *server);
uint32_t agg_server_connections(const agg_server *server);

/* Appends the server's descriptors (at most max) and returns how many were added. */
size_t agg_server_pollfds(agg_server *server, struct pollfd *fds, size_t max);
/* Processes the events of the descriptors agg_server_pollfds added (same order, same count). */
void agg_server_process(agg_server *server, const struct pollfd *fds, size_t count);

/* Sends answers given outside agg_server_process (after upstream replies) now. */
void agg_server_flush(agg_server *server);

const char *agg_rpc_path(const agg_rpc *rpc);
const uint8_t *agg_rpc_message(const agg_rpc *rpc, size_t *len);
/* The grpc-timeout header in ms (rounded up), 0 when absent. */
uint64_t agg_rpc_timeout_ms(const agg_rpc *rpc);
/* True once the client reset the call or its connection closed: the answer will be dropped. */
bool agg_rpc_cancelled(const agg_rpc *rpc);

void agg_rpc_reply(agg_rpc *rpc, const uint8_t *message, size_t len);
void agg_rpc_fail(agg_rpc *rpc, int grpc_status, const char *message);

#endif
