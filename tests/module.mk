# Every tests/test_*.c is one cmocka program; tests/support_*.c are shared helpers (the oracle).
TEST_SRCS    := $(wildcard tests/test_*.c)
TEST_SUPPORT := $(wildcard tests/support_*.c)
TEST_BINS    := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TESTS        += $(TEST_BINS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_SUPPORT:%.c=$(BUILD)/obj/%.o) $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT:%.c=$(BUILD)/obj/%.o) $(LIBS) $(LDLIBS) -lcmocka
