# proto/*.proto -> C by protoc-c into $(BUILD)/gen/proto (included as "proto/NAME.pb-c.h"),
# compiled into libisn_proto.a. Objects that include a generated header list it as an order-only
# prerequisite so the first build generates it before compiling them; -MMD tracks it afterwards.
PROTO_SRCS  := $(wildcard proto/*.proto)
PROTO_GEN_C := $(PROTO_SRCS:%.proto=$(BUILD)/gen/%.pb-c.c)
PROTO_GEN_H := $(PROTO_GEN_C:.c=.h)
PROTO_OBJS  := $(PROTO_SRCS:%.proto=$(BUILD)/obj/gen/%.pb-c.o)
PROTO_LIB   := $(BUILD)/lib/libisn_proto.a

$(BUILD)/gen/proto/%.pb-c.c $(BUILD)/gen/proto/%.pb-c.h: proto/%.proto | $(DEPS_STAMP)
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen $<

$(BUILD)/obj/gen/proto/%.pb-c.o: $(BUILD)/gen/proto/%.pb-c.c | $(PROTO_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# Every service .proto as a FileDescriptorSet, in one generated C file, for server reflection
# (grpc/reflection.c). ciff.proto is a file format (index/ciff_*.c), not part of any RPC interface.
REFLECTED_PROTOS := $(filter-out proto/ciff.proto,$(PROTO_SRCS))
PROTO_DESCS := $(REFLECTED_PROTOS:%.proto=$(BUILD)/gen/%.desc)
$(BUILD)/gen/proto/%.desc: proto/%.proto | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	protoc-c --descriptor_set_out=$@ $<
# one run makes both (a grouped target: with -j, two runs would race on the same temporary files)
$(BUILD)/gen/proto/descriptors.pb-c.c $(BUILD)/gen/proto/descriptors.pb-c.h &: $(PROTO_DESCS) proto/descriptors.sh
	bash proto/descriptors.sh $(BUILD)/gen $(REFLECTED_PROTOS)
PROTO_GEN_C += $(BUILD)/gen/proto/descriptors.pb-c.c
PROTO_GEN_H += $(BUILD)/gen/proto/descriptors.pb-c.h
PROTO_OBJS  += $(BUILD)/obj/gen/proto/descriptors.pb-c.o

$(PROTO_LIB): $(PROTO_OBJS)
LIBS   += $(PROTO_LIB)
LDLIBS += -lprotobuf-c

# Our sources that include generated headers (every test, to keep the list simple).
PROTO_USERS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard daemon/*.c grpc/*.c agg/*.c tools/isn-*.c index/ciff_*.c \
               tests/unit/*.c tests/integration/*.c tests/support/*.c))
$(PROTO_USERS): | $(PROTO_GEN_H)

.SECONDARY: $(PROTO_GEN_C) $(PROTO_GEN_H)
