#include <string.h>

#include <xxhash.h>

#include "base/base.h"

uint64_t isn_hash64(const void *data, size_t len) { return XXH64(data, len, 0); }

uint64_t isn_hash_string(const char *text) { return XXH64(text, strlen(text), 0); }
