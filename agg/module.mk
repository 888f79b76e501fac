# agg/: the aggregator's logic (isn-agg is its thin main); the tests link it through LIBS.
AGG_SRCS := $(wildcard agg/*.c)
AGG_OBJS := $(AGG_SRCS:%.c=$(BUILD)/obj/%.o)
AGG_LIB  := $(BUILD)/lib/libisn_agg.a
$(AGG_LIB): $(AGG_OBJS)
$(AGG_OBJS) $(BUILD)/obj/tests/test_agg.o: | $(PROTO_GEN_H)
LIBS   := $(AGG_LIB) $(LIBS)
LDLIBS += -linih

# Until isn-agg's server is part of grpc/, the agg unit test links the tools' copy of it.
$(BUILD)/tests/test_agg: $(BUILD)/obj/tools/agg_server.o
$(BUILD)/tests/test_agg: LDLIBS += $(BUILD)/obj/tools/agg_server.o -lnghttp2
