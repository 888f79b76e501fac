# base/: what every part needs once (clock, errors, hash, buffer, log, query logs, Prometheus text).
# The Makefile appends it to LIBS after every other module, so it comes last on every link line.
BASE_SRCS := $(wildcard base/*.c)
BASE_LIB  := $(BUILD)/lib/libisn_base.a
$(BASE_LIB): $(BASE_SRCS:%.c=$(BUILD)/obj/%.o)
