# Every tools/isn-*.c is one program, linked with every library. tools/ holds programs only; until
# isn-agg moves onto agg/ and grpc/, its helpers (tools/agg_*.c) are linked into every tool.
TOOL_SRCS   := $(wildcard tools/isn-*.c)
TOOL_COMMON := $(filter-out $(TOOL_SRCS),$(wildcard tools/*.c))
TOOL_COMMON_OBJS := $(TOOL_COMMON:%.c=$(BUILD)/obj/%.o)
TOOL_BINS   := $(TOOL_SRCS:tools/%.c=$(BUILD)/bin/%)
PROGRAMS    += $(TOOL_BINS)

$(BUILD)/bin/%: $(BUILD)/obj/tools/%.o $(TOOL_COMMON_OBJS) $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOL_COMMON_OBJS) $(LIBS) $(LDLIBS)
