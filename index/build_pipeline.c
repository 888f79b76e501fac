/* The bounded-memory build on several threads (isn-index build --threads N --memory SIZE).
 *
 * Each thread takes the next batch of input lines, parses its records, then, in batch order (one batch
 * at a time), gives each good record its partition and doc id exactly as the in-memory build would
 * (checking its id against the partition's), reports the bad ones by line, and then, on its own again,
 * analyses and inverts the batch's documents into its own builders, one per partition. When a thread's
 * builders pass its share of the memory budget they are written out as runs (build_run_file.c) and
 * emptied. At the end each partition's runs are merged into its index (build_merge.c). Everything is
 * written into a temporary folder in the output folder and renamed into place at the end, so that a
 * failed build leaves no index, and removed. ISN_BUILD_TRACE=1 in the environment says on stderr when each
 * run is written (its size against the thread's share) and when reading and merging end. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/build_input.h"
#include "index/build_runs.h"

/* Input is read in batches of at most this much, and smaller for a small input (a sixteenth of each
 * thread's share), so that every thread gets many. */
#define BATCH_BYTES (1u << 20)
#define MIN_BATCH_BYTES (16u << 10)
#define STORED_SPILL_BUFFER (1u << 20)
#define PROGRESS_SECONDS 0.5
/* The least a thread's run holds before it is written (below, runs cost more than they save). */
#define MIN_RUN_BYTES (256u << 10)

typedef struct pipeline pipeline;

/* A record of the batch being read: a good one (text in the worker's record text) or a bad one (msg). */
typedef struct {
    uint64_t line;
    size_t id_off, id_len;
    size_t field_off[ISN_MAX_FIELDS], field_len[ISN_MAX_FIELDS];
    bool has_field[ISN_MAX_FIELDS];
    float score;
    bool bad;
    size_t msg_off; /* bad: NUL-terminated in text */
    uint32_t part, doc; /* set at commit; doc UINT32_MAX when refused */
} batch_record;

/* Each worker on cache lines of its own: the threads write their workers' fields for every record. */
typedef struct {
    _Alignas(64) pipeline *pl;
    uint32_t index;
    pthread_t thread;
    input_state in;
    isn_builder **builders; /* per partition */
    char *batch;            /* the lines being read */
    size_t batch_len, batch_cap;
    uint64_t seq, first_line;
    batch_record *recs;
    uint32_t num_recs, recs_cap;
    byte_buffer text;     /* records' strings */
    byte_buffer scratch;  /* run encoding; a document's stored text */
    uint32_t next_run;
    FILE *stored_file;
    uint64_t stored_len;
    uint64_t tokens;
} worker;

struct pipeline {
    const char *input_path;
    isn_build_options opts; /* effective */
    uint32_t stored_slots[ISN_MAX_FIELDS];
    uint32_t threads, nparts;
    uint64_t memory_bytes;
    char tmp_dir[4096];
    FILE *input;
    uint64_t input_bytes; /* 0 when unknown (a pipe) */
    size_t batch_bytes;
    uint64_t total_lines; /* contiguous split */
    part_table *parts;
    worker *workers;

    /* input, under in_lock */
    pthread_mutex_t in_lock;
    char *carry; /* a line begun in the last read, not yet ended */
    size_t carry_len, carry_cap;
    uint64_t next_seq, next_line, bytes_read;
    bool eof;

    /* commit order, under commit_lock */
    pthread_mutex_t commit_lock;
    pthread_cond_t committed;
    uint64_t commit_next;
    uint64_t records, skipped, reported;
    _Atomic uint64_t doc_bytes; /* the document tables' memory */
    double start, last_progress;
    bool progress;

    /* the first error stops everything */
    pthread_mutex_t err_lock;
    _Atomic int stop;
    char err[ISN_ERR_LEN];
};

static void set_error(pipeline *pl, const char *fmt, va_list ap) {
    pthread_mutex_lock(&pl->err_lock);
    if (!atomic_load(&pl->stop)) {
        vsnprintf(pl->err, sizeof pl->err, fmt, ap);
        atomic_store(&pl->stop, 1);
    }
    pthread_mutex_unlock(&pl->err_lock);
}

/* Stops the build with this error (the first one wins); wakes the threads waiting to commit. */
static void fail(pipeline *pl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(pipeline *pl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(pl, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&pl->commit_lock);
    pthread_cond_broadcast(&pl->committed);
    pthread_mutex_unlock(&pl->commit_lock);
}

/* The same from a thread holding commit_lock. */
static void fail_committing(pipeline *pl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_committing(pipeline *pl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(pl, fmt, ap);
    va_end(ap);
    pthread_cond_broadcast(&pl->committed);
}

/* ------------------------------------------------------------------ reading batches */

/* The next batch of whole lines into w: 1 with one, 0 at the end of the input, -1 on a read error. */
static int read_batch(worker *w) {
    pipeline *pl = w->pl;
    pthread_mutex_lock(&pl->in_lock);
    int rc = 0;
    if (pl->eof || atomic_load(&pl->stop)) goto done;
    w->batch_len = 0;
    if (w->batch_cap < pl->carry_len + pl->batch_bytes) {
        size_t cap = pl->carry_len + pl->batch_bytes;
        char *b = realloc(w->batch, cap);
        if (!b) {
            rc = -1;
            fail(pl, "out of memory for an input batch");
            goto done;
        }
        w->batch = b;
        w->batch_cap = cap;
    }
    if (pl->carry_len) memcpy(w->batch, pl->carry, pl->carry_len);
    w->batch_len = pl->carry_len;
    pl->carry_len = 0;
    for (;;) {
        size_t got = fread(w->batch + w->batch_len, 1, w->batch_cap - w->batch_len, pl->input);
        w->batch_len += got;
        if (got == 0 || w->batch_len == w->batch_cap) {
            if (ferror(pl->input)) {
                fail(pl, "read error on %s: %s", pl->input_path, strerror(errno));
                rc = -1;
                goto done;
            }
            if (feof(pl->input)) {
                pl->eof = true;
                break;
            }
        }
        char *nl = memrchr(w->batch, '\n', w->batch_len);
        if (nl && w->batch_len == w->batch_cap) {
            /* keep the unfinished line for the next batch */
            size_t tail = w->batch_len - (size_t)(nl + 1 - w->batch);
            if (tail && tail > pl->carry_cap) {
                char *c = realloc(pl->carry, tail);
                if (!c) {
                    fail(pl, "out of memory for an input batch");
                    rc = -1;
                    goto done;
                }
                pl->carry = c;
                pl->carry_cap = tail;
            }
            if (tail) memcpy(pl->carry, nl + 1, tail);
            pl->carry_len = tail;
            w->batch_len -= tail;
            break;
        }
        if (w->batch_len == w->batch_cap) { /* one line longer than the batch: make room for more */
            char *b = realloc(w->batch, w->batch_cap * 2);
            if (!b) {
                fail(pl, "out of memory for an input line of more than %zu bytes", w->batch_cap);
                rc = -1;
                goto done;
            }
            w->batch = b;
            w->batch_cap *= 2;
        }
    }
    if (w->batch_len == 0) goto done;
    w->seq = pl->next_seq++;
    w->first_line = pl->next_line + 1;
    uint64_t lines = 0;
    for (const char *p = w->batch, *end = w->batch + w->batch_len; (p = memchr(p, '\n', (size_t)(end - p))); p++) lines++;
    if (w->batch[w->batch_len - 1] != '\n') lines++;
    pl->next_line += lines;
    pl->bytes_read += w->batch_len;
    rc = 1;
done:
    pthread_mutex_unlock(&pl->in_lock);
    return rc;
}

/* ------------------------------------------------------------------ parsing (input_state hooks) */

static batch_record *new_record(worker *w) {
    if (w->num_recs == w->recs_cap) {
        uint32_t cap = w->recs_cap ? w->recs_cap * 2 : 1024;
        batch_record *r = realloc(w->recs, cap * sizeof *r);
        if (!r) return NULL;
        w->recs = r;
        w->recs_cap = cap;
    }
    batch_record *r = &w->recs[w->num_recs++];
    memset(r, 0, sizeof *r);
    r->line = w->in.line;
    return r;
}

static bool keep_text(worker *w, const char *s, size_t len, size_t *off) {
    *off = w->text.len;
    return buffer_append(&w->text, s, len) && buffer_append(&w->text, "", 1);
}

static int take_bad(input_state *in, const char *what) {
    worker *w = in->ctx;
    batch_record *r = new_record(w);
    if (!r || !keep_text(w, what, strlen(what), &r->msg_off)) return fail(w->pl, "out of memory while reading records"), -1;
    r->bad = true;
    return 0;
}

static int take_record(input_state *in, const char *id, const char *const *fields, const size_t *lens, float score) {
    worker *w = in->ctx;
    const char *refused = isn_builder_record_error(in->options, id, fields, lens);
    if (refused) return take_bad(in, refused);
    batch_record *r = new_record(w);
    if (!r) return fail(w->pl, "out of memory while reading records"), -1;
    r->id_len = strlen(id);
    r->score = score;
    bool ok = keep_text(w, id, r->id_len, &r->id_off);
    for (uint32_t f = 0; ok && f < in->options->num_fields; f++) {
        r->has_field[f] = fields[f] != NULL;
        r->field_len[f] = fields[f] ? lens[f] : 0;
        if (fields[f]) ok = keep_text(w, fields[f], lens[f], &r->field_off[f]);
    }
    if (!ok) return fail(w->pl, "out of memory while reading records"), -1;
    return 0;
}

static int parse_batch(worker *w) {
    w->num_recs = 0;
    w->text.len = 0;
    const char *p = w->batch, *end = w->batch + w->batch_len;
    w->in.line = w->first_line;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (input_parse_line(&w->in, p, len) != 0) {
            if (!atomic_load(&w->pl->stop)) fail(w->pl, "out of memory while reading records");
            return -1;
        }
        p += len + 1;
        w->in.line++;
    }
    return 0;
}

/* ------------------------------------------------------------------ commit, in batch order */

static int report_bad(pipeline *pl, uint64_t line, const char *what) {
    pl->skipped++;
    if (pl->opts.strict) {
        fprintf(stderr, "isn-index: %s:%llu: %s\n", pl->input_path, (unsigned long long)line, what);
        fail_committing(pl, "%s:%llu: stopped at this record", pl->input_path, (unsigned long long)line);
        return -1;
    }
    if (pl->reported++ < ISN_MAX_REPORTED_BAD_RECORDS)
        fprintf(stderr, "isn-index: %s:%llu: %s (record skipped)\n", pl->input_path, (unsigned long long)line, what);
    else if (pl->reported == ISN_MAX_REPORTED_BAD_RECORDS + 1)
        fprintf(stderr, "isn-index: further bad records are counted, not shown\n");
    return 0;
}


/* Room in the partition's document tables for doc. */
static int part_reserve(pipeline *pl, part_table *p, uint32_t doc) {
    uint32_t chunk = doc >> DOC_CHUNK_BITS;
    if (chunk < p->num_chunks) return 0;
    uint32_t nf = pl->opts.num_fields;
    p->lens[chunk] = malloc((size_t)DOC_CHUNK * nf * sizeof **p->lens);
    p->scores[chunk] = malloc((size_t)DOC_CHUNK * sizeof **p->scores);
    bool global = pl->opts.order == ISN_ORDER_GLOBAL;
    if (pl->opts.num_stored) p->stored[chunk] = malloc((size_t)DOC_CHUNK * sizeof **p->stored);
    if (global) p->max_tfs[chunk] = malloc((size_t)DOC_CHUNK * sizeof **p->max_tfs);
    if (!p->lens[chunk] || !p->scores[chunk] || (pl->opts.num_stored && !p->stored[chunk]) || (global && !p->max_tfs[chunk]))
        return -1;
    p->num_chunks++;
    atomic_fetch_add(&pl->doc_bytes, (uint64_t)DOC_CHUNK * (nf * sizeof(uint32_t) + sizeof(float) +
                                                           (pl->opts.num_stored ? sizeof(stored_ref) : 0) +
                                                           (global ? sizeof(uint32_t) : 0)));
    return 0;
}

static int commit_batch(worker *w) {
    pipeline *pl = w->pl;
    pthread_mutex_lock(&pl->commit_lock);
    while (pl->commit_next != w->seq && !atomic_load(&pl->stop)) pthread_cond_wait(&pl->committed, &pl->commit_lock);
    int rc = atomic_load(&pl->stop) ? -1 : 0;
    for (uint32_t i = 0; rc == 0 && i < w->num_recs; i++) {
        batch_record *r = &w->recs[i];
        r->doc = UINT32_MAX;
        if (r->bad) {
            rc = report_bad(pl, r->line, (const char *)w->text.data + r->msg_off);
            continue;
        }
        const char *id = (const char *)w->text.data + r->id_off;
        uint32_t part = input_partition_of(&pl->opts, id, r->id_len, r->line, pl->total_lines);
        part_table *p = &pl->parts[part];
        if (p->num_docs == UINT32_MAX - 1) {
            char msg[96];
            snprintf(msg, sizeof msg, "too many documents for one partition (max %u)", UINT32_MAX - 1);
            rc = report_bad(pl, r->line, msg);
            continue;
        }
        uint64_t before = id_table_bytes(&p->ids);
        bool added;
        if (id_table_intern(&p->ids, id, r->id_len, &added) == UINT32_MAX || part_reserve(pl, p, p->num_docs) != 0) {
            fail_committing(pl, "%s:%llu: out of memory while indexing document %u", pl->input_path,
                            (unsigned long long)r->line, p->num_docs);
            rc = -1;
            break;
        }
        atomic_fetch_add(&pl->doc_bytes, id_table_bytes(&p->ids) - before);
        if (!added) {
            char msg[ISN_ERR_LEN];
            snprintf(msg, sizeof msg, "duplicate id \"%.*s\"", (int)(r->id_len > 80 ? 80 : r->id_len), id);
            rc = report_bad(pl, r->line, msg);
            continue;
        }
        r->part = part;
        r->doc = p->num_docs++;
        p->scores[r->doc >> DOC_CHUNK_BITS][r->doc & (DOC_CHUNK - 1)] = r->score;
        pl->records++;
    }
    if (rc == 0) {
        pl->commit_next++;
        pthread_cond_broadcast(&pl->committed);
        double now = isn_now_seconds();
        if (pl->progress && now - pl->last_progress >= PROGRESS_SECONDS) {
            pl->last_progress = now;
            input_show_progress(pl->bytes_read, pl->input_bytes, pl->records, now - pl->start, false);
        }
    }
    pthread_mutex_unlock(&pl->commit_lock);
    return rc;
}

/* ------------------------------------------------------------------ inversion and runs */

/* A thread's run and what its batch holds beyond the fixed allowance (records of many short lines). */
static uint64_t worker_run_bytes(const worker *w) {
    uint64_t bytes = w->scratch.cap + (uint64_t)w->recs_cap * sizeof *w->recs;
    if (w->text.cap > BATCH_BYTES) bytes += w->text.cap - BATCH_BYTES;
    for (uint32_t p = 0; p < w->pl->nparts; p++) bytes += isn_builder_run_bytes(w->builders[p]);
    return bytes;
}

/* jemalloc's control, when the program runs on jemalloc (isn-index does): weak, so that index/ needs it not. */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) __attribute__((weak));

static void first_malloc_trim(void) {
    malloc_trim(0);
}

/* Gives the pages of a written run back to the system: the allocator would keep them for seconds, and
 * the budget is on resident memory. glibc sets its heap up at the first call into it, and that setup is
 * not thread-safe: where nothing has called glibc's malloc yet (a sanitizer's allocator in its place), two
 * threads' first malloc_trim raced, one walking the heap's bins before the other had made them (SEGV in
 * mtrim). So the first call goes alone. */
static void release_freed_memory(void) {
    static pthread_once_t first_trim = PTHREAD_ONCE_INIT;
    if (mallctl) mallctl("arena.4096.purge", NULL, NULL, NULL, 0); /* 4096: MALLCTL_ARENAS_ALL */
    else if (pthread_once(&first_trim, first_malloc_trim) == 0) malloc_trim(0);
}

static int flush_runs(worker *w) {
    pipeline *pl = w->pl;
    for (uint32_t p = 0; p < pl->nparts; p++) {
        isn_builder *b = w->builders[p];
        if (isn_strtab_count(&b->terms) == 0) continue;
        part_table *part = &pl->parts[p];
        run_info run;
        memset(&run, 0, sizeof run);
        snprintf(run.path, sizeof run.path, "%s/run-%04u-%03u-%06u", pl->tmp_dir, p, w->index, w->next_run++);
        char err[ISN_ERR_LEN];
        if (run_write(b, &run, &w->scratch, err, sizeof err) != 0) return fail(pl, "%s", err), -1;
        pthread_mutex_lock(&part->runs_lock);
        int rc = 0;
        if (part->num_runs == part->runs_cap) {
            uint32_t cap = part->runs_cap ? part->runs_cap * 2 : 16;
            run_info *r = realloc(part->runs, cap * sizeof *r);
            if (r) {
                part->runs = r;
                part->runs_cap = cap;
            } else {
                rc = -1;
            }
        }
        if (rc == 0) part->runs[part->num_runs++] = run;
        pthread_mutex_unlock(&part->runs_lock);
        if (rc != 0 || isn_builder_reset_run(b) != 0) {
            unlink(run.path);
            if (rc != 0) run_info_free(&run);
            return fail(pl, "out of memory after writing run %s", run.path), -1;
        }
    }
    /* the encoding scratch grows with the largest list; let it go with the run */
    buffer_free(&w->scratch);
    release_freed_memory();
    return 0;
}

/* What the build holds besides runs and document tables: per thread its builders' stem caches, the batch
 * being read, its records' text, and the stored-text spill buffer. */
static uint64_t fixed_bytes(uint32_t threads, uint32_t nparts) {
    return (uint64_t)threads * (nparts * (2u << 20) + 3 * BATCH_BYTES + STORED_SPILL_BUFFER);
}

uint64_t isn_build_memory_floor(const isn_build_options *o) {
    uint32_t threads = o->threads ? o->threads : 1, nparts = o->partitions ? o->partitions : 1;
    return fixed_bytes(threads, nparts) + MIN_RUN_BYTES * threads + (1u << 20);
}

/* The run budget of one thread: its share of what the document tables leave. */
static uint64_t run_share(const pipeline *pl) {
    if (!pl->memory_bytes) return UINT64_MAX;
    uint64_t fixed = fixed_bytes(pl->threads, pl->nparts);
    uint64_t used = fixed + atomic_load(&pl->doc_bytes);
    uint64_t left = pl->memory_bytes > used ? pl->memory_bytes - used : 0;
    uint64_t share = left / pl->threads;
    return share < MIN_RUN_BYTES ? MIN_RUN_BYTES : share;
}

static int store_document(worker *w, const batch_record *r) {
    pipeline *pl = w->pl;
    uint32_t ns = pl->opts.num_stored;
    byte_buffer *doc = &w->scratch;
    doc->len = 0;
    uint64_t text = 0;
    for (uint32_t i = 0; i < ns; i++) {
        uint32_t f = pl->stored_slots[i];
        size_t len = r->field_len[f];
        if (!buffer_reserve(doc, 5 + len)) return -1;
        doc->len = (size_t)(isn_varint_put((uint8_t *)doc->data + doc->len, (uint32_t)len) - (uint8_t *)doc->data);
        if (len) memcpy(doc->data + doc->len, w->text.data + r->field_off[f], len);
        doc->len += len;
        text += len;
    }
    if (fwrite(doc->data, 1, doc->len, w->stored_file) != doc->len) return -2;
    *part_stored(&pl->parts[r->part], r->doc) =
        (stored_ref){.offset = w->stored_len, .raw_bytes = doc->len, .text_bytes = text, .file = w->index};
    w->stored_len += doc->len;
    return 0;
}

static int invert_batch(worker *w) {
    pipeline *pl = w->pl;
    uint32_t nf = pl->opts.num_fields;
    for (uint32_t i = 0; i < w->num_recs; i++) {
        const batch_record *r = &w->recs[i];
        if (r->doc == UINT32_MAX) continue;
        const char *fields[ISN_MAX_FIELDS];
        size_t lens[ISN_MAX_FIELDS];
        for (uint32_t f = 0; f < nf; f++) {
            fields[f] = r->has_field[f] ? (const char *)w->text.data + r->field_off[f] : NULL;
            lens[f] = r->field_len[f];
        }
        part_table *p = &pl->parts[r->part];
        if (isn_builder_invert(w->builders[r->part], r->doc, fields, lens, part_lens(p, r->doc, nf)) != 0)
            return fail(pl, "%s:%llu: out of memory while indexing document %u", pl->input_path,
                        (unsigned long long)r->line, r->doc), -1;
        if (p->max_tfs) *part_max_tf(p, r->doc) = w->builders[r->part]->doc_max_tf;
        if (pl->opts.num_stored) {
            int s = store_document(w, r);
            if (s == -1) return fail(pl, "out of memory while keeping stored fields"), -1;
            if (s == -2) return fail(pl, "cannot write the stored fields' temporary file in %s: %s", pl->tmp_dir, strerror(errno)), -1;
        }
    }
    return 0;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    pipeline *pl = w->pl;
    if (pl->opts.format == ISN_FORMAT_JSONL && input_thread_begin() != 0) {
        fail(pl, "out of memory for the JSON record arena");
        return NULL;
    }
    /* The builders (analyzer, stem cache, term table) are made on the thread that fills them, so that the
     * allocator puts them in its own arena: made on the main thread, the threads' analyzers lay side by side
     * and every token written by one evicted the other's cache line (the stemmer's state most). */
    for (uint32_t p = 0; p < pl->nparts; p++)
        if (!(w->builders[p] = isn_builder_new(&pl->opts))) {
            fail(pl, "cannot create the builder (out of memory or bad analyzer settings)");
            input_thread_end();
            return NULL;
        }
    int got;
    while ((got = read_batch(w)) == 1) {
        if (parse_batch(w) != 0 || commit_batch(w) != 0 || invert_batch(w) != 0) break;
        if (worker_run_bytes(w) > run_share(pl)) {
            if (getenv("ISN_BUILD_TRACE"))
                fprintf(stderr, "trace: thread %u flushes %.1f MiB (share %.1f MiB, documents %.1f MiB)\n", w->index,
                        worker_run_bytes(w) / 1048576.0, run_share(pl) / 1048576.0, atomic_load(&pl->doc_bytes) / 1048576.0);
            if (flush_runs(w) != 0) break;
        }
    }
    if (got == 0 && !atomic_load(&pl->stop)) flush_runs(w);
    input_thread_end();
    return NULL;
}

/* ------------------------------------------------------------------ the temporary folder */

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir) {
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Moves each partition's index from the temporary folder into out_dir, once every one is written. */
static int publish(const pipeline *pl, const char *out_dir, char *err, size_t err_len) {
    for (uint32_t p = 0; p < pl->nparts; p++) {
        char from[4400], to[4400];
        if (pl->nparts > 1) {
            snprintf(to, sizeof to, "%s/part-%04u", out_dir, p);
            if (mkdir(to, 0755) != 0 && errno != EEXIST)
                return isn_error(err, err_len, "cannot create directory %s: %s", to, strerror(errno));
            snprintf(from, sizeof from, "%s/part-%04u/%s", pl->tmp_dir, p, ISN_INDEX_FILE);
            snprintf(to, sizeof to, "%s/part-%04u/%s", out_dir, p, ISN_INDEX_FILE);
        } else {
            snprintf(from, sizeof from, "%s/%s", pl->tmp_dir, ISN_INDEX_FILE);
            snprintf(to, sizeof to, "%s/%s", out_dir, ISN_INDEX_FILE);
        }
        if (rename(from, to) != 0) return isn_error(err, err_len, "cannot move %s to %s: %s", from, to, strerror(errno));
    }
    return 0;
}

static void pipeline_free(pipeline *pl) {
    if (pl->workers)
        for (uint32_t i = 0; i < pl->threads; i++) {
            worker *w = &pl->workers[i];
            for (uint32_t p = 0; w->builders && p < pl->nparts; p++) isn_builder_free(w->builders[p]);
            free(w->builders);
            free(w->batch);
            free(w->recs);
            buffer_free(&w->text);
            buffer_free(&w->scratch);
            if (w->stored_file) fclose(w->stored_file);
            input_state_free(&w->in);
        }
    free(pl->workers);
    if (pl->parts)
        for (uint32_t p = 0; p < pl->nparts; p++) {
            part_table *t = &pl->parts[p];
            id_table_free(&t->ids);
            for (uint32_t c = 0; c < MAX_DOC_CHUNKS && t->lens; c++) {
                if (!t->lens[c] && !t->scores[c]) break;
                free(t->lens[c]);
                free(t->scores[c]);
                if (t->stored) free(t->stored[c]);
                if (t->max_tfs) free(t->max_tfs[c]);
            }
            free(t->lens);
            free(t->scores);
            free(t->stored);
            free(t->max_tfs);
            for (uint32_t r = 0; r < t->num_runs; r++) run_info_free(&t->runs[r]);
            free(t->runs);
            pthread_mutex_destroy(&t->runs_lock);
        }
    free(pl->parts);
    free(pl->carry);
    if (pl->input && pl->input != stdin) fclose(pl->input);
    pthread_mutex_destroy(&pl->in_lock);
    pthread_mutex_destroy(&pl->commit_lock);
    pthread_mutex_destroy(&pl->err_lock);
    pthread_cond_destroy(&pl->committed);
}

static int pipeline_init(pipeline *pl, const char *input_path, const char *out_dir, const isn_build_options *options,
                         char *err, size_t err_len) {
    pthread_mutex_init(&pl->in_lock, NULL);
    pthread_mutex_init(&pl->commit_lock, NULL);
    pthread_mutex_init(&pl->err_lock, NULL);
    pthread_cond_init(&pl->committed, NULL);
    pl->input_path = input_path;
    input_effective_options(options, &pl->opts);
    pl->nparts = pl->opts.partitions;
    pl->threads = options->threads ? options->threads : 1;
    pl->memory_bytes = options->memory_bytes;
    for (uint32_t f = 0, slot = 0; f < pl->opts.num_fields; f++)
        for (uint32_t i = 0; i < pl->opts.num_stored; i++)
            if (strncmp(pl->opts.stored[i], pl->opts.fields[f], ISN_FIELD_NAME_MAX) == 0) pl->stored_slots[slot++] = f;
    if (isn_build_options_check(&pl->opts, err, err_len) != 0) return -1;
    if (strcmp(input_path, "-") == 0) {
        pl->input = stdin;
        if (pl->nparts > 1 && pl->opts.split == ISN_SPLIT_CONTIGUOUS)
            return isn_error(err, err_len, "--split contiguous counts the input's lines first: give a file, not standard input");
    } else if (!(pl->input = fopen(input_path, "rb"))) {
        return isn_error(err, err_len, "cannot open %s: %s", input_path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(pl->input), &st) == 0 && S_ISREG(st.st_mode)) pl->input_bytes = (uint64_t)st.st_size;
    if (pl->nparts > 1 && pl->opts.split == ISN_SPLIT_CONTIGUOUS) pl->total_lines = input_count_lines(pl->input);
    uint64_t floor = isn_build_memory_floor(options);
    if (pl->memory_bytes && pl->memory_bytes < floor)
        return isn_error(err, err_len, "--memory %llu bytes is too little for %u threads and %u partitions: give at least %llu MiB",
                         (unsigned long long)pl->memory_bytes, pl->threads, pl->nparts,
                         (unsigned long long)((floor + (1u << 20) - 1) >> 20));
    pl->batch_bytes = BATCH_BYTES;
    if (pl->input_bytes) {
        uint64_t want = pl->input_bytes / ((uint64_t)pl->threads * 16);
        pl->batch_bytes = want < MIN_BATCH_BYTES ? MIN_BATCH_BYTES : want > BATCH_BYTES ? BATCH_BYTES : (size_t)want;
    }

    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return isn_error(err, err_len, "cannot create directory %s: %s", out_dir, strerror(errno));
    snprintf(pl->tmp_dir, sizeof pl->tmp_dir, "%s/.isn-build-XXXXXX", out_dir);
    if (!mkdtemp(pl->tmp_dir)) {
        pl->tmp_dir[0] = 0;
        return isn_error(err, err_len, "cannot create a temporary folder in %s: %s", out_dir, strerror(errno));
    }
    pl->parts = calloc(pl->nparts, sizeof *pl->parts);
    pl->workers = aligned_alloc(_Alignof(worker), pl->threads * sizeof *pl->workers);
    if (pl->workers) memset(pl->workers, 0, pl->threads * sizeof *pl->workers);
    if (!pl->parts || !pl->workers) return isn_error(err, err_len, "out of memory for the build's threads");
    for (uint32_t p = 0; p < pl->nparts; p++) {
        part_table *t = &pl->parts[p];
        pthread_mutex_init(&t->runs_lock, NULL);
        t->lens = calloc(MAX_DOC_CHUNKS, sizeof *t->lens);
        t->scores = calloc(MAX_DOC_CHUNKS, sizeof *t->scores);
        t->stored = calloc(MAX_DOC_CHUNKS, sizeof *t->stored);
        if (pl->opts.order == ISN_ORDER_GLOBAL && !(t->max_tfs = calloc(MAX_DOC_CHUNKS, sizeof *t->max_tfs)))
            return isn_error(err, err_len, "out of memory for the document tables");
        if (!t->lens || !t->scores || !t->stored || id_table_init(&t->ids) != 0)
            return isn_error(err, err_len, "out of memory for the document tables");
        atomic_fetch_add(&pl->doc_bytes, id_table_bytes(&t->ids));
        if (pl->nparts > 1) {
            char dir[4400];
            snprintf(dir, sizeof dir, "%s/part-%04u", pl->tmp_dir, p);
            if (mkdir(dir, 0755) != 0) return isn_error(err, err_len, "cannot create directory %s: %s", dir, strerror(errno));
        }
    }
    for (uint32_t i = 0; i < pl->threads; i++) {
        worker *w = &pl->workers[i];
        w->pl = pl;
        w->index = i;
        input_state_init(&w->in, input_path, &pl->opts);
        w->in.take = take_record;
        w->in.bad = take_bad;
        w->in.ctx = w;
        w->builders = calloc(pl->nparts, sizeof *w->builders);
        if (!w->builders) return isn_error(err, err_len, "out of memory for the build's threads");
        if (pl->opts.num_stored) {
            if (!(w->stored_file = build_temp_file(pl->tmp_dir, "stored", err, err_len))) return -1;
            setvbuf(w->stored_file, NULL, _IOFBF, STORED_SPILL_BUFFER);
        }
    }
    return 0;
}

int build_bounded(const char *input_path, const char *out_dir, const isn_build_options *options,
                  isn_build_summary *summary, char *err, size_t err_len) {
    pipeline *pl = calloc(1, sizeof *pl);
    if (!pl) return isn_error(err, err_len, "out of memory");
    pl->start = isn_now_seconds();
    pl->progress = options->progress && isatty(STDERR_FILENO);
    int rc = pipeline_init(pl, input_path, out_dir, options, err, err_len);
    uint32_t started = 0;
    for (; rc == 0 && started < pl->threads; started++)
        if (pthread_create(&pl->workers[started].thread, NULL, worker_main, &pl->workers[started]) != 0) {
            fail(pl, "cannot start build thread %u: %s", started, strerror(errno));
            break;
        }
    for (uint32_t i = 0; i < started; i++) pthread_join(pl->workers[i].thread, NULL);
    if (getenv("ISN_BUILD_TRACE")) fprintf(stderr, "trace: input done at %.3f s\n", isn_now_seconds() - pl->start);
    if (rc == 0 && atomic_load(&pl->stop)) {
        snprintf(err, err_len, "%s", pl->err);
        rc = -1;
    }
    if (pl->progress && rc == 0) input_show_progress(pl->bytes_read, pl->input_bytes, pl->records, isn_now_seconds() - pl->start, true);
    for (uint32_t i = 0; rc == 0 && pl->opts.num_stored && i < pl->threads; i++)
        if (fflush(pl->workers[i].stored_file) != 0)
            rc = isn_error(err, err_len, "cannot write the stored fields' temporary file in %s: %s", pl->tmp_dir, strerror(errno));
    FILE *stored_files[pl->threads ? pl->threads : 1];
    for (uint32_t i = 0; rc == 0 && i < pl->threads; i++) stored_files[i] = pl->workers[i].stored_file;
    /* The threads' builders go before the merge needs the memory. */
    for (uint32_t i = 0; rc == 0 && i < pl->threads; i++) {
        for (uint32_t p = 0; p < pl->nparts; p++) {
            pl->workers[i].tokens += pl->workers[i].builders[p]->tokens;
            pl->parts[p].tokens += pl->workers[i].builders[p]->tokens;
            isn_builder_free(pl->workers[i].builders[p]);
            pl->workers[i].builders[p] = NULL;
        }
    }
    if (pl->progress && rc == 0) {
        uint64_t runs = 0;
        for (uint32_t p = 0; p < pl->nparts; p++) runs += pl->parts[p].num_runs;
        fprintf(stderr, "merging %llu runs into %u partition%s on %u threads...\n", (unsigned long long)runs, pl->nparts,
                pl->nparts > 1 ? "s" : "", pl->threads);
    }
    for (uint32_t p = 0; rc == 0 && p < pl->nparts; p++) {
        char index_dir[4400];
        if (pl->nparts > 1) snprintf(index_dir, sizeof index_dir, "%s/part-%04u", pl->tmp_dir, p);
        else snprintf(index_dir, sizeof index_dir, "%s", pl->tmp_dir);
        merge_job job = {&pl->opts, pl->stored_slots, &pl->parts[p], stored_files, pl->threads, pl->memory_bytes, pl->tmp_dir, index_dir};
        isn_build_summary part;
        memset(&part, 0, sizeof part);
        rc = merge_partition(&job, &part, err, err_len);
        input_add_summary(summary, &part);
        summary->runs += part.runs;
        for (uint32_t r = 0; r < pl->parts[p].num_runs; r++) unlink(pl->parts[p].runs[r].path);
    }
    if (getenv("ISN_BUILD_TRACE")) fprintf(stderr, "trace: merged at %.3f s\n", isn_now_seconds() - pl->start);
    if (rc == 0) rc = publish(pl, out_dir, err, err_len);
    if (pl->tmp_dir[0]) remove_tree(pl->tmp_dir);
    summary->records_read = pl->records + pl->skipped;
    summary->records_skipped = pl->skipped;
    summary->seconds = isn_now_seconds() - pl->start;
    pipeline_free(pl);
    free(pl);
    return rc;
}
