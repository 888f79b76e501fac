# isnd: daemon/isnd.c is the program; the rest of daemon/*.c is libisn_daemon.a, which the tests
# link through LIBS (request handling, metrics...).
DAEMON_MAIN := daemon/isnd.c
DAEMON_SRCS := $(filter-out $(DAEMON_MAIN),$(wildcard daemon/*.c))
DAEMON_LIB  := $(BUILD)/lib/libisn_daemon.a
$(DAEMON_LIB): $(DAEMON_SRCS:%.c=$(BUILD)/obj/%.o)
LIBS     := $(DAEMON_LIB) $(LIBS)
LDLIBS   += -luv -lsystemd
PROGRAMS += $(BUILD)/bin/isnd

$(BUILD)/bin/isnd: $(BUILD)/obj/daemon/isnd.o $$(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)
