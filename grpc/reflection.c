/* gRPC server reflection (grpc.reflection.v1 and the older v1alpha: the same messages) on the
 * server core, so grpcurl, evans and grpcio's reflection client list and describe the services
 * with no .proto file at hand. The answers come from the file descriptors protoc-c wrote at build
 * time (proto/descriptors.sh): every service of the project is offered by both servers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/server_internal.h"
#include "proto/descriptors.pb-c.h"
#include "proto/reflection.pb-c.h"

static const char *const SERVICES[] = {
    "isn.v1.Search",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
};
#define NUM_SERVICES (sizeof SERVICES / sizeof SERVICES[0])

/* The one FileDescriptorProto inside a file's FileDescriptorSet (field 1, length-delimited). */
static bool file_descriptor(const isn_proto_file *file, ProtobufCBinaryData *out) {
    const uint8_t *p = file->set, *end = file->set + file->set_len;
    if (p >= end || *p++ != 0x0a) return false;
    uint64_t len = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
        uint8_t b = *p++;
        len |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (len > (uint64_t)(end - p)) return false;
            out->data = (uint8_t *)p;
            out->len = (size_t)len;
            return true;
        }
    }
    return false;
}

/* The file that defines `symbol` ("isn.v1.Search", "isn.v1.SearchRequest", "isn.v1.Search.Search"):
 * the one whose package is the symbol's prefix, longest first (v1alpha before v1 is not a prefix
 * issue: "grpc.reflection.v1." and "grpc.reflection.v1alpha." differ at the dot). */
static const isn_proto_file *file_of_symbol(const char *symbol) {
    const isn_proto_file *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < isn_proto_num_files; i++) {
        const isn_proto_file *f = &isn_proto_files[i];
        size_t n = strlen(f->package);
        if (!strncmp(symbol, f->package, n) && symbol[n] == '.' && symbol[n + 1] && n > best_len) best = f, best_len = n;
    }
    return best;
}

static const isn_proto_file *file_by_name(const char *name) {
    for (size_t i = 0; i < isn_proto_num_files; i++) {
        const char *full = isn_proto_files[i].name, *base = strrchr(full, '/');
        if (!strcmp(name, full) || (base && !strcmp(name, base + 1))) return &isn_proto_files[i];
    }
    return NULL;
}

static void answer(isn_grpc_call *call, const uint8_t *message, size_t len) {
    Grpc__Reflection__V1__ServerReflectionRequest *request =
        grpc__reflection__v1__server_reflection_request__unpack(NULL, len, message);
    if (!request) {
        isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_INVALID_ARGUMENT,
                                "request is not a valid grpc.reflection.v1.ServerReflectionRequest message");
        return;
    }
    Grpc__Reflection__V1__ServerReflectionResponse response = GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    Grpc__Reflection__V1__ListServiceResponse list = GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1__ServiceResponse services[NUM_SERVICES], *service_ptrs[NUM_SERVICES];
    Grpc__Reflection__V1__FileDescriptorResponse files = GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    ProtobufCBinaryData descriptor;
    Grpc__Reflection__V1__ErrorResponse error = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    char why[300];
    response.valid_host = request->host ? request->host : "";
    response.original_request = request;
    const isn_proto_file *file = NULL;
    switch (request->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        for (size_t i = 0; i < NUM_SERVICES; i++) {
            grpc__reflection__v1__service_response__init(&services[i]);
            services[i].name = (char *)SERVICES[i];
            service_ptrs[i] = &services[i];
        }
        list.n_service = NUM_SERVICES;
        list.service = service_ptrs;
        response.message_response_case = GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        response.list_services_response = &list;
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        if (!(file = file_by_name(request->file_by_filename)))
            snprintf(why, sizeof why, "no file named %.200s", request->file_by_filename);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        if (!(file = file_of_symbol(request->file_containing_symbol)))
            snprintf(why, sizeof why, "no symbol %.200s", request->file_containing_symbol);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
        snprintf(why, sizeof why, "no extensions: the services are proto3");
        break;
    default: snprintf(why, sizeof why, "empty reflection request"); break;
    }
    if (file && file_descriptor(file, &descriptor)) {
        files.n_file_descriptor_proto = 1;
        files.file_descriptor_proto = &descriptor;
        response.message_response_case = GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
        response.file_descriptor_response = &files;
    } else if (!response.list_services_response) {
        error.error_code = ISN_GRPC_STATUS_NOT_FOUND;
        error.error_message = why;
        response.message_response_case = GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
        response.error_response = &error;
    }
    isn_grpc_call_stream_send(call, &response.base);
    grpc__reflection__v1__server_reflection_request__free_unpacked(request, NULL);
}

static void on_message(isn_grpc_call *call, const uint8_t *message, size_t len, void *user) {
    (void)user;
    answer(call, message, len);
}

static void on_half_close(isn_grpc_call *call, void *user) {
    (void)user;
    isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_OK, "");
}

static const isn_grpc_stream_handlers REFLECTION_HANDLERS = {on_message, on_half_close, NULL};

bool isn_grpc_reflection_serve(isn_grpc_call *call) {
    const char *path = isn_grpc_call_path(call);
    if (strcmp(path, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo") &&
        strcmp(path, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"))
        return false;
    if (isn_grpc_call_stream(call, &REFLECTION_HANDLERS, NULL) != 0)
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for a reflection stream");
    return true;
}
