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
#include "index/jsonl_scan.h"

#define MAX_REPORTED_BAD_RECORDS 50

typedef struct {
    const char *path;
    const isn_build_options *options;
    isn_builder **parts;
    uint64_t line;
    uint64_t total_lines; /* for the contiguous split */
    uint64_t records, skipped, reported;
    char *clean; /* the line with invalid UTF-8 replaced */
    size_t clean_cap;
    /* JSONL keys read: the id, the indexed fields in order, then the static score's when set */
    const char *keys[ISN_MAX_FIELDS + 2];
    uint32_t num_keys;
    char *scratch; /* a record's decoded strings (jsonl_scan.c) */
    size_t scratch_cap;
} input_state;

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

static int bad_record(input_state *s, const char *what) {
    s->skipped++;
    if (s->options->strict) {
        fprintf(stderr, "isn-index: %s:%llu: %s\n", s->path, (unsigned long long)s->line, what);
        return -1;
    }
    if (s->reported++ < MAX_REPORTED_BAD_RECORDS)
        fprintf(stderr, "isn-index: %s:%llu: %s (record skipped)\n", s->path, (unsigned long long)s->line, what);
    else if (s->reported == MAX_REPORTED_BAD_RECORDS + 1)
        fprintf(stderr, "isn-index: further bad records are counted, not shown\n");
    return 0;
}

static uint32_t partition_of(const input_state *s, const char *id, size_t id_len) {
    uint32_t n = s->options->partitions;
    if (n <= 1) return 0;
    if (s->options->split == ISN_SPLIT_HASH) return (uint32_t)(isn_hash64(id, id_len) % n);
    uint64_t per = (s->total_lines + n - 1) / n;
    uint32_t p = (uint32_t)((s->line - 1) / (per ? per : 1));
    return p < n ? p : n - 1;
}

static int add_record(input_state *s, const char *id, const char *const *fields, const size_t *lens, float score) {
    char err[ISN_ERR_LEN];
    uint32_t p = partition_of(s, id, strlen(id));
    if (isn_builder_add(s->parts[p], id, fields, lens, score, err, sizeof err) != 0) {
        if (s->parts[p]->oom) {
            fprintf(stderr, "isn-index: %s:%llu: %s\n", s->path, (unsigned long long)s->line, err);
            return -1;
        }
        return bad_record(s, err);
    }
    s->records++;
    return 0;
}

static int parse_tsv(input_state *s, const char *line, size_t len) {
    const char *tab = memchr(line, '\t', len);
    if (!tab) return bad_record(s, "no TAB between id and text");
    char id[1024];
    size_t id_len = (size_t)(tab - line);
    if (id_len == 0) return bad_record(s, "missing id");
    if (id_len >= sizeof id) return bad_record(s, "id longer than 1023 bytes");
    memcpy(id, line, id_len);
    id[id_len] = 0;
    const char *fields[1] = {tab + 1};
    size_t lens[1] = {len - id_len - 1};
    return add_record(s, id, fields, lens, 0.0f);
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
        return bad_record(s, msg);
    }
    if (r->bad_field >= 0) {
        snprintf(msg, sizeof msg, "field \"%s\" is not a string", o->fields[r->bad_field]);
        return bad_record(s, msg);
    }
    if (r->score_state < 0) {
        snprintf(msg, sizeof msg, "static score \"%s\" is not a number", o->static_score_field);
        return bad_record(s, msg);
    }
    return add_record(s, r->id, r->fields, r->lens, r->score);
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
        return bad_record(s, msg);
    }
    int rc;
    const isn_build_options *o = s->options;
    char id_buf[64];
    if (!json_is_object(doc)) {
        rc = bad_record(s, "record is not a JSON object");
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

static uint64_t count_lines(FILE *f) {
    char buf[1 << 16];
    uint64_t n = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        for (char *p = buf; (p = memchr(p, '\n', (size_t)(buf + got - p))); p++) n++;
    rewind(f);
    return n;
}

static void show_progress(const input_state *s, uint64_t done, uint64_t total) {
    int width = 40, filled = total ? (int)(done * (uint64_t)width / total) : 0;
    char bar[41];
    memset(bar, '#', (size_t)filled);
    memset(bar + filled, ' ', (size_t)(width - filled));
    bar[width] = 0;
    fprintf(stderr, "\r[%s] %3d%% %llu records", bar, total ? (int)(done * 100 / total) : 0, (unsigned long long)s->records);
}

int isn_build_from_file(const char *input_path, const char *out_dir, const isn_build_options *options,
                        isn_build_summary *summary, char *err, size_t err_len) {
    double start = isn_now_seconds();
    memset(summary, 0, sizeof *summary);
    uint32_t nparts = options->partitions ? options->partitions : 1;
    if (nparts > 4096) {
        snprintf(err, err_len, "--partitions %u is more than 4096", nparts);
        return -1;
    }
    isn_build_options opts = *options;
    if (opts.format == ISN_FORMAT_TSV) {
        opts.num_fields = 1;
        snprintf(opts.fields[0], ISN_FIELD_NAME_MAX, "body");
        opts.static_score_field[0] = 0;
    }
    FILE *f = fopen(input_path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open %s: %s", input_path, strerror(errno));
        return -1;
    }
    struct stat st;
    uint64_t file_bytes = fstat(fileno(f), &st) == 0 ? (uint64_t)st.st_size : 0;
    input_state s = {.path = input_path, .options = &opts};
    s.keys[s.num_keys++] = opts.id_field;
    for (uint32_t i = 0; i < opts.num_fields; i++) s.keys[s.num_keys++] = opts.fields[i];
    if (opts.static_score_field[0]) s.keys[s.num_keys++] = opts.static_score_field;
    if (nparts > 1 && opts.split == ISN_SPLIT_CONTIGUOUS) s.total_lines = count_lines(f);
    s.parts = calloc(nparts, sizeof *s.parts);
    int rc = s.parts ? 0 : -1;
    for (uint32_t p = 0; p < nparts && rc == 0; p++)
        if (!(s.parts[p] = isn_builder_new(&opts))) rc = -1;
    if (rc != 0) snprintf(err, err_len, "cannot create the builder (out of memory or bad analyzer settings)");

    static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;
    pthread_once(&hooks_once, install_arena_hooks);
    if (rc == 0 && opts.format == ISN_FORMAT_JSONL && !(thread_arena.base = malloc(RECORD_ARENA_BYTES))) {
        snprintf(err, err_len, "out of memory for the JSON record arena");
        rc = -1;
    }

    bool progress = opts.progress && isatty(STDERR_FILENO);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    uint64_t bytes_read = 0;
    while (rc == 0 && (got = getline(&line, &cap, f)) >= 0) {
        s.line++;
        bytes_read += (uint64_t)got;
        size_t len = (size_t)got;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (len == 0) continue;
        size_t clean_len;
        const char *clean = sanitize_utf8(&s, line, len, &clean_len);
        if (!clean) rc = -1;
        else rc = opts.format == ISN_FORMAT_TSV ? parse_tsv(&s, clean, clean_len) : parse_jsonl(&s, clean, clean_len);
        if (rc != 0) snprintf(err, err_len, "%s:%llu: stopped at this record", input_path, (unsigned long long)s.line);
        if (progress && (s.line & 0xffff) == 0) show_progress(&s, bytes_read, file_bytes);
    }
    if (progress) {
        show_progress(&s, file_bytes, file_bytes);
        fputc('\n', stderr);
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, err_len, "read error on %s: %s", input_path, strerror(errno));
        rc = -1;
    }
    free(line);
    free(s.clean);
    free(s.scratch);
    free(thread_arena.base);
    thread_arena.base = NULL;
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
        summary->docs += part.docs;
        summary->terms += part.terms;
        summary->postings += part.postings;
        summary->tokens += part.tokens;
        summary->bytes_total += part.bytes_total;
        summary->bytes_postings += part.bytes_postings;
        summary->bytes_block_meta += part.bytes_block_meta;
        summary->bytes_positions += part.bytes_positions;
        summary->bytes_lexicon += part.bytes_lexicon;
        summary->bytes_docs += part.bytes_docs;
        summary->bytes_stored += part.bytes_stored;
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
