# Every tools/isn-*.c is one program, linked with every library; tools/ holds programs only (the
# layout check fails on a tools/ header used elsewhere).
TOOL_SRCS := $(wildcard tools/isn-*.c)
TOOL_BINS := $(TOOL_SRCS:tools/%.c=$(BUILD)/bin/%)
PROGRAMS  += $(TOOL_BINS)

$(BUILD)/bin/%: $(BUILD)/obj/tools/%.o $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)
