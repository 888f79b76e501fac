/* The English stopword list, the same 33 words as Lucene's EnglishAnalyzer default. */
#include "index/analyzer_internal.h"

static const char *const english_stopwords[] = {
    "a",    "an",   "and",  "are",  "as",    "at",    "be",    "but",  "by",   "for",  "if",
    "in",   "into", "is",   "it",   "no",    "not",   "of",    "on",   "or",   "such", "that",
    "the",  "their", "then", "there", "these", "they", "this",  "to",   "was",  "will", "with",
};

void stopword_set_init(stopword_set *set) {
    memset(set, 0, sizeof *set);
    for (size_t i = 0; i < sizeof english_stopwords / sizeof english_stopwords[0]; i++) {
        const char *word = english_stopwords[i];
        uint64_t key = stopword_key(word, strlen(word));
        uint32_t slot = stopword_slot(key);
        while (set->keys[slot] != 0 && set->keys[slot] != key)
            slot = (slot + 1) & (STOPWORD_SLOTS - 1);
        set->keys[slot] = key;
    }
}
