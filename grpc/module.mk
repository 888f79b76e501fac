# grpc/: the one gRPC-over-HTTP/2 layer (framing, server core, stats endpoint, client), libisn_grpc.a.
# It uses the generated proto headers (the client's isn.v1 calls), libuv and nghttp2.
# TLS with OpenSSL (libssl-dev).
GRPC_SRCS := $(wildcard grpc/*.c)
GRPC_LIB  := $(BUILD)/lib/libisn_grpc.a
$(GRPC_LIB): $(GRPC_SRCS:%.c=$(BUILD)/obj/%.o)
LIBS   := $(GRPC_LIB) $(LIBS)
LDLIBS += -luv -lnghttp2 -lssl -lcrypto
