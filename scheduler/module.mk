SCHEDULER_SRCS := $(wildcard scheduler/*.c)
SCHEDULER_LIB  := $(BUILD)/lib/libisn_scheduler.a
$(SCHEDULER_LIB): $(SCHEDULER_SRCS:%.c=$(BUILD)/obj/%.o)
LIBS := $(SCHEDULER_LIB) $(LIBS)
