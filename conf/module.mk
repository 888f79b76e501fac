# Configuration loading (libinih) for isnd; its tests link it through LIBS.
CONF_SRCS := $(wildcard conf/*.c)
CONF_LIB  := $(BUILD)/lib/libisn_conf.a
$(CONF_LIB): $(CONF_SRCS:%.c=$(BUILD)/obj/%.o)
LIBS   := $(CONF_LIB) $(LIBS)
LDLIBS += -linih
