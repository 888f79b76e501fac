/* gRPC message framing and protobuf decode, as the server core meets them: the request body in
 * DATA chunks of any size (isn_grpc_reader), then the unpack of the message as each request type the
 * servers accept, the NUL-in-string check, the load generator's read of one top-level varint field
 * (of any body, unpacked or not), and grpc-timeout parsing of the input's first bytes.
 * Input: byte 0 picks the chunk size and the message type, the rest is the stream body. */
#include <stdint.h>
#include <string.h>

#include "grpc/framing.h"
#include "proto/health.pb-c.h"
#include "proto/isn.pb-c.h"

static const ProtobufCMessageDescriptor *const TYPES[] = {
    &isn__v1__search_request__descriptor,
    &isn__v1__info_request__descriptor,
    &grpc__health__v1__health_check_request__descriptor,
    &isn__v1__search_response__descriptor,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t control = data[0];
    data++, size--;

    uint64_t ns;
    isn_grpc_parse_timeout((const char *)data, size < 12 ? size : 12, &ns);
    char encoded[256];
    char text[128];
    size_t tn = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, tn);
    text[tn] = '\0';
    isn_grpc_percent_encode(text, encoded, sizeof encoded);
    char timeout[ISN_GRPC_TIMEOUT_MAX_LEN];
    isn_grpc_format_timeout(ns, timeout, sizeof timeout);

    uint8_t inline_buf[64];
    isn_grpc_memory_budget budget = {.limit = 1 << 20};
    isn_grpc_reader reader;
    isn_grpc_reader_init(&reader, inline_buf, sizeof inline_buf, 1 << 16);
    isn_grpc_reader_set_budget(&reader, &budget);
    size_t chunk = (size_t)(control & 0x0f) + 1;
    isn_grpc_read_result result = ISN_GRPC_READ_OK;
    for (size_t at = 0; at < size && result == ISN_GRPC_READ_OK; at += chunk)
        result = isn_grpc_reader_feed(&reader, data + at, size - at < chunk ? size - at : chunk);
    if (result == ISN_GRPC_READ_OK) result = isn_grpc_reader_finish(&reader);
    char why[200];
    isn_grpc_reader_describe(&reader, result, why, sizeof why);
    if (result == ISN_GRPC_READ_OK) {
        uint64_t value;
        isn_grpc_message_varint_field(reader.body, reader.length, (uint32_t)(control & 0x1f), &value);
        const ProtobufCMessageDescriptor *type = TYPES[(control >> 4) % (sizeof TYPES / sizeof TYPES[0])];
        ProtobufCMessage *message = protobuf_c_message_unpack(type, NULL, reader.length, reader.body);
        if (message) {
            char field[128];
            isn_grpc_message_nul_string_field(type, reader.body, reader.length, field, sizeof field);
            protobuf_c_message_free_unpacked(message, NULL);
        }
    }
    isn_grpc_reader_reset(&reader);
    if (budget.used != 0) __builtin_trap(); /* every charge released */
    return 0;
}
