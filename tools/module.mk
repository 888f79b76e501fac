# Every tools/isn-*.c is one program, linked with every library and with the shared tool code
# (tools/*.c that are not programs, e.g. the gRPC client).
TOOL_SRCS   := $(wildcard tools/isn-*.c)
TOOL_COMMON := $(filter-out $(TOOL_SRCS),$(wildcard tools/*.c))
TOOL_COMMON_OBJS := $(TOOL_COMMON:%.c=$(BUILD)/obj/%.o)
TOOL_BINS   := $(TOOL_SRCS:tools/%.c=$(BUILD)/bin/%)
PROGRAMS    += $(TOOL_BINS)

$(BUILD)/bin/%: $(BUILD)/obj/tools/%.o $(TOOL_COMMON_OBJS) $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOL_COMMON_OBJS) $(LIBS) $(LDLIBS)
