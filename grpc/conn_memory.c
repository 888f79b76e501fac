/* What a connection holds outside its calls, charged to the server's memory budget while it is held:
 * the connection itself, its output buffers, and everything nghttp2 allocates for it (the session,
 * its streams, HPACK tables, queued frames), through an nghttp2_mem allocator that counts the bytes
 * each block really takes (its size class, kept in a header before it). These charges are never
 * refused: failing an allocation inside nghttp2 would break a well-behaved connection midway. They fill the budget like
 * any other, so new connections, streams and requests are refused once it is used up.
 *
 * The connection counts its bytes itself and holds them in the shared budget (which the servers of
 * every loop update atomically) in steps: it takes RESERVE_STEP more than it holds when it needs more,
 * and gives back only when it holds two steps more than it uses. A request's allocations and frees
 * then move its own count alone, not a cache line that every loop writes. */
#include <stdint.h>
#include <stdlib.h>

#include "grpc/server_internal.h"

#define RESERVE_STEP 4096

static void charge(isn_grpc_conn *conn, size_t bytes) {
    conn->charged += bytes;
    if (conn->charged <= conn->reserved) return;
    uint64_t more = conn->charged - conn->reserved + RESERVE_STEP;
    isn_grpc_budget_add(conn->server->budget, more);
    conn->reserved += more;
}

static void uncharge(isn_grpc_conn *conn, size_t bytes) {
    conn->charged -= bytes;
    if (conn->reserved <= conn->charged + 2 * RESERVE_STEP) return;
    uint64_t less = conn->reserved - conn->charged - RESERVE_STEP;
    isn_grpc_budget_release(conn->server->budget, less);
    conn->reserved -= less;
}

/* Each block carries its charge in a header before it, so that a free finds it without asking the
 * allocator (malloc_usable_size looks the block up in jemalloc's page map, at every one of the dozen
 * allocations and frees a request makes in nghttp2). HEADER_BYTES keeps malloc's alignment. */
#define HEADER_BYTES 16

/* What a block of `bytes` really takes: jemalloc's size class when the program is linked with it. */
extern size_t nallocx(size_t size, int flags) __attribute__((weak));
static size_t block_bytes(size_t bytes) {
    size_t real = nallocx ? nallocx(bytes, 0) : 0;
    return real ? real : bytes;
}

static void *with_header(void *block, size_t bytes, isn_grpc_conn *conn) {
    size_t charged = block_bytes(bytes);
    *(size_t *)block = charged;
    charge(conn, charged);
    return (char *)block + HEADER_BYTES;
}

static void *header_of(void *payload) { return (char *)payload - HEADER_BYTES; }

static void *mem_malloc(size_t size, void *user_data) {
    if (size > SIZE_MAX - HEADER_BYTES) return NULL;
    void *block = malloc(size + HEADER_BYTES);
    return block ? with_header(block, size + HEADER_BYTES, user_data) : NULL;
}

static void mem_free(void *payload, void *user_data) {
    if (!payload) return;
    void *block = header_of(payload);
    uncharge(user_data, *(size_t *)block);
    free(block);
}

static void *mem_calloc(size_t count, size_t size, void *user_data) {
    if (size && count > (SIZE_MAX - HEADER_BYTES) / size) return NULL;
    void *block = calloc(1, count * size + HEADER_BYTES);
    return block ? with_header(block, count * size + HEADER_BYTES, user_data) : NULL;
}

static void *mem_realloc(void *payload, size_t size, void *user_data) {
    if (!payload) return mem_malloc(size, user_data);
    if (size > SIZE_MAX - HEADER_BYTES) return NULL;
    void *block = header_of(payload);
    size_t before = *(size_t *)block;
    void *grown = realloc(block, size + HEADER_BYTES);
    if (!grown) return NULL; /* the old block stays, still charged */
    uncharge(user_data, before);
    return with_header(grown, size + HEADER_BYTES, user_data);
}

void isn_grpc_conn_memory_init(isn_grpc_conn *conn) {
    conn->mem = (nghttp2_mem){.mem_user_data = conn,
                              .malloc = mem_malloc,
                              .free = mem_free,
                              .calloc = mem_calloc,
                              .realloc = mem_realloc};
    charge(conn, sizeof *conn);
}

void isn_grpc_conn_memory_charge_tls(isn_grpc_conn *conn) { charge(conn, TLS_CONN_BYTES); }

void isn_grpc_conn_memory_track_buffers(isn_grpc_conn *conn) {
    uint64_t held = conn->pending.cap + conn->sending.cap;
    if (held > conn->buffers_charged) charge(conn, held - conn->buffers_charged);
    else uncharge(conn, conn->buffers_charged - held);
    conn->buffers_charged = held;
}

void isn_grpc_conn_memory_release(isn_grpc_conn *conn) {
    isn_grpc_budget_release(conn->server->budget, conn->reserved);
    conn->charged = conn->reserved = 0;
    conn->buffers_charged = 0;
}
