INDEX_SRCS := $(wildcard index/*.c)
INDEX_LIB  := $(BUILD)/lib/libisn_index.a
$(INDEX_LIB): $(INDEX_SRCS:%.c=$(BUILD)/obj/%.o)
LIBS += $(INDEX_LIB)
