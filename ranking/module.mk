RANKING_SRCS := $(wildcard ranking/*.c)
RANKING_LIB  := $(BUILD)/lib/libisn_ranking.a
$(RANKING_LIB): $(RANKING_SRCS:%.c=$(BUILD)/obj/%.o)
LIBS := $(RANKING_LIB) $(LIBS)
