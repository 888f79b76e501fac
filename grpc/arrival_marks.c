/* When the bytes a connection reads can have reached its socket (server_internal.h, the arrival
 * marks): after each read the socket's length is noted (0 when the read did not fill the buffer,
 * FIONREAD otherwise), which says that every byte up to that offset of the stream had arrived by
 * then. A byte at offset x arrived after the last mark whose end is at or below x: the socket held
 * less than x then. In a standing backlog (full reads, bytes left queued) that mark is where the
 * backlog began, however many reads ago, so a request that waited in the socket is seen as old as it
 * is; when the socket keeps up, it is the last read. */
#include "grpc/server_internal.h"

uint64_t isn_grpc_arrival_since(const isn_grpc_arrival_marks *marks, uint64_t unknown_ns) {
    uint64_t since = unknown_ns;
    for (uint32_t i = 0; i < marks->count; i++)
        if (marks->end[i] <= marks->read_total) since = marks->at_ns[i];
    return since;
}

void isn_grpc_arrival_note_read(isn_grpc_arrival_marks *marks, size_t nread, uint64_t queued, uint64_t at_ns) {
    marks->read_total += nread;
    /* Full, the newest mark is overwritten: the older ones keep the bound conservative (older). */
    uint32_t slot = marks->count < ISN_GRPC_ARRIVAL_MARKS ? marks->count++ : ISN_GRPC_ARRIVAL_MARKS - 1;
    marks->at_ns[slot] = at_ns;
    marks->end[slot] = marks->read_total + queued;
    /* Marks below the newest one at or under the stream's read offset will not be asked again: every
     * later read starts at or past that offset. */
    uint32_t keep_from = 0;
    for (uint32_t i = 0; i < marks->count; i++)
        if (marks->end[i] <= marks->read_total) keep_from = i;
    if (!keep_from) return;
    for (uint32_t i = keep_from; i < marks->count; i++) {
        marks->at_ns[i - keep_from] = marks->at_ns[i];
        marks->end[i - keep_from] = marks->end[i];
    }
    marks->count -= keep_from;
}
