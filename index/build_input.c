/* Reads JSON Lines or TSV input into one builder per partition, reporting bad records by line. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#include "base/base.h"
#include "index/builder.h"
#include "index/build_input.h"
#include "index/jsonl_scan.h"


/* The in-memory build's reader: every record goes to its partition's builder as it is read. */
typedef struct {
    input_state in;
    isn_builder **parts;
    uint64_t total_lines; /* for the contiguous split */
    uint64_t records, skipped, reported;
} memory_build;

/* Replaces every invalid UTF-8 sequence with U+FFFD, so that one bad byte costs a token, not the record. */
static const char *sanitize_utf8(input_state *s, const char *line, size_t len, size_t *out_len) {
    size_t i = 0;
    for (uint64_t w; i + 8 <= len && (memcpy(&w, line + i, 8), (w & 0x8080808080808080ull) == 0); i += 8) continue;
    while (i < len && (unsigned char)line[i] < 0x80) i++;
    if (i == len) {
        *out_len = len;
        return line;
    }
    if (s->clean_cap < len * 3 + 1) {
        char *c = realloc(s->clean, len * 3 + 1);
        if (!c) return NULL;
        s->clean = c;
        s->clean_cap = len * 3 + 1;
    }
    memcpy(s->clean, line, i);
    size_t o = i;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)line + i, (utf8proc_ssize_t)(len - i), &cp);
        if (n > 0) {
            memcpy(s->clean + o, line + i, (size_t)n);
            o += (size_t)n;
            i += (size_t)n;
        } else {
            memcpy(s->clean + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    s->clean[o] = 0;
    *out_len = o;
    return s->clean;
}

/* Per-record arena for jansson: a record's DOM is a dozen small allocations (object, hash buckets,
 * keys, strings, the lexer's growing buffer) that all die together at json_decref, so while a thread
 * parses a record they come from a bump pointer reset after it. Jansson's allocator hooks are
 * process-wide and take no context, so the hooks are installed once and, outside an active arena
 * (other threads, other jansson users, a record too big for the arena), hand over to malloc/free. */
#define RECORD_ARENA_BYTES (256u << 10)

typedef struct {
    char *base;  /* NULL when this thread parses no record */
    size_t used; /* bytes handed out since the last reset */
} record_arena;

static _Thread_local record_arena thread_arena;

static void *arena_malloc(size_t n) {
    record_arena *a = &thread_arena;
    size_t at = (a->used + 15) & ~(size_t)15;
    if (a->base && n <= RECORD_ARENA_BYTES - at) {
        a->used = at + n;
        return a->base + at;
    }
    return malloc(n);
}

static void arena_free(void *p) {
    const record_arena *a = &thread_arena;
    if (a->base && (const char *)p >= a->base && (const char *)p < a->base + RECORD_ARENA_BYTES) return;
    free(p);
}

static void install_arena_hooks(void) {
    json_set_alloc_funcs(arena_malloc, arena_free);
}

int input_thread_begin(void) {
    static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;
    pthread_once(&hooks_once, install_arena_hooks);
    if (!thread_arena.base) thread_arena.base = malloc(RECORD_ARENA_BYTES);
    return thread_arena.base ? 0 : -1;
}

void input_thread_end(void) {
    free(thread_arena.base);
    thread_arena.base = NULL;
}

void input_state_init(input_state *s, const char *path, const isn_build_options *o) {
    memset(s, 0, sizeof *s);
    s->path = path;
    s->options = o;
    s->keys[s->num_keys++] = o->id_field;
    for (uint32_t i = 0; i < o->num_fields; i++) s->keys[s->num_keys++] = o->fields[i];
    if (o->static_score_field[0]) s->keys[s->num_keys++] = o->static_score_field;
}

void input_state_free(input_state *s) {
    free(s->clean);
    free(s->scratch);
    s->clean = s->scratch = NULL;
}

static int memory_bad_record(input_state *in, const char *what) {
    memory_build *s = in->ctx;
    s->skipped++;
    if (in->options->strict) {
        fprintf(stderr, "isn-index: %s:%llu: %s\n", in->path, (unsigned long long)in->line, what);
        return -1;
    }
    if (s->reported++ < ISN_MAX_REPORTED_BAD_RECORDS)
        fprintf(stderr, "isn-index: %s:%llu: %s (record skipped)\n", in->path, (unsigned long long)in->line, what);
    else if (s->reported == ISN_MAX_REPORTED_BAD_RECORDS + 1)
        fprintf(stderr, "isn-index: further bad records are counted, not shown\n");
    return 0;
}

uint32_t input_partition_of(const isn_build_options *o, const char *id, size_t id_len, uint64_t line, uint64_t total_lines) {
    uint32_t n = o->partitions;
    if (n <= 1) return 0;
    if (o->split == ISN_SPLIT_HASH) return (uint32_t)(isn_hash64(id, id_len) % n);
    uint64_t per = (total_lines + n - 1) / n;
    uint32_t p = (uint32_t)((line - 1) / (per ? per : 1));
    return p < n ? p : n - 1;
}

static int memory_add_record(input_state *in, const char *id, const char *const *fields, const size_t *lens, float score) {
    memory_build *s = in->ctx;
    char err[ISN_ERR_LEN];
    uint32_t p = input_partition_of(in->options, id, strlen(id), in->line, s->total_lines);
    if (isn_builder_add(s->parts[p], id, fields, lens, score, err, sizeof err) != 0) {
        if (s->parts[p]->oom) {
            fprintf(stderr, "isn-index: %s:%llu: %s\n", in->path, (unsigned long long)in->line, err);
            return -1;
        }
        return memory_bad_record(in, err);
    }
    s->records++;
    return 0;
}

static int parse_tsv(input_state *s, const char *line, size_t len) {
    const char *tab = memchr(line, '\t', len);
    if (!tab) return s->bad(s, "no TAB between id and text");
    char id[1024];
    size_t id_len = (size_t)(tab - line);
    if (id_len == 0) return s->bad(s, "missing id");
    if (id_len >= sizeof id) return s->bad(s, "id longer than 1023 bytes");
    memcpy(id, line, id_len);
    id[id_len] = 0;
    const char *fields[1] = {tab + 1};
    size_t lens[1] = {len - id_len - 1};
    return s->take(s, id, fields, lens, 0.0f);
}

/* What a record holds for the build, from either JSON reader, checked the same way after. */
typedef struct {
    const char *id; /* NULL or empty: missing */
    const char *fields[ISN_MAX_FIELDS];
    size_t lens[ISN_MAX_FIELDS];
    int bad_field; /* the first indexed field that is neither a string nor null, or -1 */
    int score_state; /* 0 no static score, 1 one, -1 a value that is not a number */
    float score;
} json_record;

static int take_record(input_state *s, const json_record *r) {
    const isn_build_options *o = s->options;
    char msg[ISN_ERR_LEN + 64];
    if (!r->id || !r->id[0]) {
        snprintf(msg, sizeof msg, "missing id (key \"%s\" must be a non-empty string or an integer)", o->id_field);
        return s->bad(s, msg);
    }
    if (r->bad_field >= 0) {
        snprintf(msg, sizeof msg, "field \"%s\" is not a string", o->fields[r->bad_field]);
        return s->bad(s, msg);
    }
    if (r->score_state < 0) {
        snprintf(msg, sizeof msg, "static score \"%s\" is not a number", o->static_score_field);
        return s->bad(s, msg);
    }
    return s->take(s, r->id, r->fields, r->lens, r->score);
}

/* The common record, a flat object of strings, read in one pass (jsonl_scan.c); 0 when jansson must. */
static int scan_record(input_state *s, const char *line, size_t len, json_record *r) {
    if (s->scratch_cap < len + 1) {
        char *p = realloc(s->scratch, len + 1);
        if (!p) return 0;
        s->scratch = p;
        s->scratch_cap = len + 1;
    }
    jsonl_value v[ISN_MAX_FIELDS + 2];
    if (!jsonl_scan_flat_object(line, len, s->keys, s->num_keys, v, s->scratch)) return 0;
    r->id = v[0].kind == JSONL_STRING ? v[0].text : NULL;
    for (uint32_t f = 0; f < s->options->num_fields; f++) {
        const jsonl_value *field = &v[1 + f];
        if (field->kind == JSONL_STRING) {
            r->fields[f] = field->text;
            r->lens[f] = field->len;
        } else if (field->kind == JSONL_BOOL && r->bad_field < 0) {
            r->bad_field = (int)f;
        }
    }
    /* A number always goes to jansson, so a static score seen here is not one. */
    if (s->options->static_score_field[0] && v[1 + s->options->num_fields].kind != JSONL_ABSENT) r->score_state = -1;
    return 1;
}

static int parse_jsonl(input_state *s, const char *line, size_t len) {
    json_record r = {.bad_field = -1};
    if (scan_record(s, line, len, &r)) return take_record(s, &r);
    json_error_t jerr;
    thread_arena.used = 0;
    json_t *doc = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
    if (!doc) {
        char msg[ISN_ERR_LEN + 64];
        snprintf(msg, sizeof msg, "malformed JSON at column %d: %s", jerr.column, jerr.text);
        return s->bad(s, msg);
    }
    int rc;
    const isn_build_options *o = s->options;
    char id_buf[64];
    if (!json_is_object(doc)) {
        rc = s->bad(s, "record is not a JSON object");
        goto done;
    }
    json_t *jid = json_object_get(doc, o->id_field);
    if (json_is_string(jid)) r.id = json_string_value(jid);
    else if (json_is_integer(jid)) {
        snprintf(id_buf, sizeof id_buf, "%lld", (long long)json_integer_value(jid));
        r.id = id_buf;
    }
    for (uint32_t f = 0; f < o->num_fields; f++) {
        json_t *v = json_object_get(doc, o->fields[f]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_string(v)) {
            if (r.bad_field < 0) r.bad_field = (int)f;
            continue;
        }
        r.fields[f] = json_string_value(v);
        r.lens[f] = json_string_length(v);
    }
    if (o->static_score_field[0]) {
        json_t *v = json_object_get(doc, o->static_score_field);
        if (v) r.score_state = json_is_number(v) ? 1 : -1;
        if (json_is_number(v)) r.score = (float)json_number_value(v);
    }
    rc = take_record(s, &r);
done:
    json_decref(doc);
    return rc;
}

uint64_t input_count_lines(FILE *f) {
    char buf[1 << 16];
    uint64_t n = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        for (char *p = buf; (p = memchr(p, '\n', (size_t)(buf + got - p))); p++) n++;
    rewind(f);
    return n;
}

void input_show_progress(uint64_t bytes_done, uint64_t bytes_total, uint64_t docs, double seconds, bool last) {
    int width = 30, filled = bytes_total ? (int)(bytes_done * (uint64_t)width / bytes_total) : 0;
    if (filled > width) filled = width;
    char bar[31], eta[32] = "";
    memset(bar, '#', (size_t)filled);
    memset(bar + filled, ' ', (size_t)(width - filled));
    bar[width] = 0;
    double rate = seconds > 0 ? (double)docs / seconds : 0;
    if (bytes_total && bytes_done && bytes_done < bytes_total && seconds > 1) {
        double left = seconds * (double)(bytes_total - bytes_done) / (double)bytes_done;
        snprintf(eta, sizeof eta, ", ETA %d:%02d", (int)(left / 60), (int)left % 60);
    }
    if (bytes_total)
        fprintf(stderr, "\r[%s] %3d%% %llu docs, %.0f docs/s%s   ", bar, (int)(bytes_done * 100 / bytes_total),
                (unsigned long long)docs, rate, eta);
    else
        fprintf(stderr, "\r%llu docs, %.0f docs/s   ", (unsigned long long)docs, rate);
    if (last) fputc('\n', stderr);
}

int input_parse_line(input_state *s, const char *line, size_t len) {
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    if (len == 0) return 0;
    size_t clean_len;
    const char *clean = sanitize_utf8(s, line, len, &clean_len);
    if (!clean) return -1;
    return s->options->format == ISN_FORMAT_TSV ? parse_tsv(s, clean, clean_len) : parse_jsonl(s, clean, clean_len);
}

void input_effective_options(const isn_build_options *options, isn_build_options *opts) {
    *opts = *options;
    if (opts->format == ISN_FORMAT_TSV) {
        opts->num_fields = 1;
        snprintf(opts->fields[0], ISN_FIELD_NAME_MAX, "body");
        opts->static_score_field[0] = 0;
    }
    if (opts->partitions == 0) opts->partitions = 1;
}

void input_add_summary(isn_build_summary *total, const isn_build_summary *part) {
    total->docs += part->docs;
    total->terms += part->terms;
    total->postings += part->postings;
    total->tokens += part->tokens;
    total->bytes_total += part->bytes_total;
    total->bytes_postings += part->bytes_postings;
    total->bytes_block_meta += part->bytes_block_meta;
    total->bytes_positions += part->bytes_positions;
    total->bytes_lexicon += part->bytes_lexicon;
    total->bytes_docs += part->bytes_docs;
    total->bytes_stored += part->bytes_stored;
}

/* Every document in memory, one builder per partition, written at the end: the build without --threads
 * or --memory, and the reference the bounded build's bytes are checked against. */
static int build_in_memory(const char *input_path, const char *out_dir, const isn_build_options *options,
                           isn_build_summary *summary, char *err, size_t err_len) {
    double start = isn_now_seconds();
    uint32_t nparts = options->partitions;
    isn_build_options opts;
    input_effective_options(options, &opts);
    if (isn_build_options_check(&opts, err, err_len) != 0) return -1;
    FILE *f = fopen(input_path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open %s: %s", input_path, strerror(errno));
        return -1;
    }
    struct stat st;
    uint64_t file_bytes = fstat(fileno(f), &st) == 0 ? (uint64_t)st.st_size : 0;
    memory_build s = {0};
    input_state_init(&s.in, input_path, &opts);
    s.in.take = memory_add_record;
    s.in.bad = memory_bad_record;
    s.in.ctx = &s;
    if (nparts > 1 && opts.split == ISN_SPLIT_CONTIGUOUS) s.total_lines = input_count_lines(f);
    s.parts = calloc(nparts, sizeof *s.parts);
    int rc = s.parts ? 0 : -1;
    for (uint32_t p = 0; p < nparts && rc == 0; p++)
        if (!(s.parts[p] = isn_builder_new(&opts))) rc = -1;
    if (rc != 0) snprintf(err, err_len, "cannot create the builder (out of memory or bad analyzer settings)");
    if (rc == 0 && opts.format == ISN_FORMAT_JSONL && input_thread_begin() != 0) {
        snprintf(err, err_len, "out of memory for the JSON record arena");
        rc = -1;
    }

    bool progress = opts.progress && isatty(STDERR_FILENO);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    uint64_t bytes_read = 0;
    while (rc == 0 && (got = getline(&line, &cap, f)) >= 0) {
        s.in.line++;
        bytes_read += (uint64_t)got;
        rc = input_parse_line(&s.in, line, (size_t)got);
        if (rc != 0) snprintf(err, err_len, "%s:%llu: stopped at this record", input_path, (unsigned long long)s.in.line);
        if (progress && (s.in.line & 0xffff) == 0) input_show_progress(bytes_read, file_bytes, s.records, isn_now_seconds() - start, false);
    }
    if (progress) input_show_progress(file_bytes, file_bytes, s.records, isn_now_seconds() - start, true);
    if (rc == 0 && ferror(f)) {
        snprintf(err, err_len, "read error on %s: %s", input_path, strerror(errno));
        rc = -1;
    }
    free(line);
    input_state_free(&s.in);
    input_thread_end();
    fclose(f);

    if (rc == 0 && nparts > 1 && mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "cannot create directory %s: %s", out_dir, strerror(errno));
        rc = -1;
    }
    for (uint32_t p = 0; p < nparts && rc == 0; p++) {
        char dir[4096];
        if (nparts > 1) snprintf(dir, sizeof dir, "%s/part-%04u", out_dir, p);
        else snprintf(dir, sizeof dir, "%s", out_dir);
        isn_build_summary part;
        memset(&part, 0, sizeof part);
        rc = isn_builder_write(s.parts[p], dir, &part, err, err_len);
        input_add_summary(summary, &part);
        isn_builder_free(s.parts[p]);
        s.parts[p] = NULL;
    }
    for (uint32_t p = 0; s.parts && p < nparts; p++) isn_builder_free(s.parts[p]);
    free(s.parts);
    summary->records_read = s.records + s.skipped;
    summary->records_skipped = s.skipped;
    summary->seconds = isn_now_seconds() - start;
    return rc;
}

int isn_build_from_file(const char *input_path, const char *out_dir, const isn_build_options *options,
                        isn_build_summary *summary, char *err, size_t err_len) {
    memset(summary, 0, sizeof *summary);
    uint32_t nparts = options->partitions ? options->partitions : 1;
    if (nparts > 4096) {
        snprintf(err, err_len, "--partitions %u is more than 4096", nparts);
        return -1;
    }
    if (options->num_attributes && (options->format != ISN_FORMAT_JSONL || strcmp(input_path, "-") == 0)) {
        snprintf(err, err_len, "--attribute needs JSON Lines from a file (it is read again once the index is written)");
        return -1;
    }
    int rc = options->threads <= 1 && options->memory_bytes == 0
                 ? build_in_memory(input_path, out_dir, options, summary, err, err_len)
                 : build_bounded(input_path, out_dir, options, summary, err, err_len);
    for (uint32_t p = 0; rc == 0 && p < (options->num_attributes ? nparts : 0); p++) {
        char dir[4096];
        if (nparts > 1) snprintf(dir, sizeof dir, "%s/part-%04u", out_dir, p);
        else snprintf(dir, sizeof dir, "%s", out_dir);
        rc = isn_attributes_build(input_path, dir, options, err, err_len);
    }
    return rc;
}
