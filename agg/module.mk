# agg/: the aggregator (isn-agg is its thin main), on grpc/ and libuv; the tests link it through LIBS.
AGG_SRCS := $(wildcard agg/*.c)
AGG_OBJS := $(AGG_SRCS:%.c=$(BUILD)/obj/%.o)
AGG_LIB  := $(BUILD)/lib/libisn_agg.a
$(AGG_LIB): $(AGG_OBJS)
$(AGG_OBJS): | $(PROTO_GEN_H)
LIBS   := $(AGG_LIB) $(LIBS)
LDLIBS += -linih -lcares

