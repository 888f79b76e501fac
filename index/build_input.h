/* Reading records (JSON Lines or TSV) for the index builds: one input_state per reading thread; each
 * record goes to `take`, each bad one to `bad`. Private to index/ (build_input.c, build_pipeline.c). */
#ifndef ISN_INDEX_BUILD_INPUT_H
#define ISN_INDEX_BUILD_INPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "index/index.h"

#define ISN_MAX_REPORTED_BAD_RECORDS 50

typedef struct input_state input_state;
struct input_state {
    const char *path;
    const isn_build_options *options; /* effective options (input_effective_options) */
    uint64_t line;                    /* of the record being read, from 1 */
    char *clean;                      /* the line with invalid UTF-8 replaced */
    size_t clean_cap;
    /* JSONL keys read: the id, the indexed fields in order, then the static score's when set */
    const char *keys[ISN_MAX_FIELDS + 2];
    uint32_t num_keys;
    char *scratch; /* a record's decoded strings (jsonl_scan.c) */
    size_t scratch_cap;
    /* A good record (fields[f] NULL when absent) and a bad one: 0 to go on, -1 to stop the build. */
    int (*take)(input_state *s, const char *id, const char *const *fields, const size_t *lens, float score);
    int (*bad)(input_state *s, const char *what);
    void *ctx;
};

void input_state_init(input_state *s, const char *path, const isn_build_options *effective);
void input_state_free(input_state *s);
/* One line (its newline included or not): the record to take or bad; empty lines are skipped. 0, or -1
 * when take or bad said stop, or out of memory. */
int input_parse_line(input_state *s, const char *line, size_t len);
/* The calling thread's JSON record arena (jansson's allocations while it parses a record): 0, or -1 out
 * of memory. */
int input_thread_begin(void);
void input_thread_end(void);

/* The options as the build uses them (a TSV input has one field, "body"; partitions at least 1). */
void input_effective_options(const isn_build_options *options, isn_build_options *effective);
/* The partition of a record (the line number and the input's line count matter for the contiguous split). */
uint32_t input_partition_of(const isn_build_options *o, const char *id, size_t id_len, uint64_t line, uint64_t total_lines);
/* Lines in f, which is rewound. */
uint64_t input_count_lines(FILE *f);
/* The progress line on stderr: bytes of input read, documents, their rate and the time left. */
void input_show_progress(uint64_t bytes_done, uint64_t bytes_total, uint64_t docs, double seconds, bool last);
void input_add_summary(isn_build_summary *total, const isn_build_summary *part);

/* The build with --threads or --memory (build_pipeline.c): same arguments as isn_build_from_file. */
int build_bounded(const char *input_path, const char *out_dir, const isn_build_options *options,
                  isn_build_summary *summary, char *err, size_t err_len);

#endif
