/* Document attributes: DIR/attributes.isn, written from the build's input once the index is written
 * (records matched to documents by external id, so every document order and partitioning gets its
 * own documents' values), mapped and validated at open, read per candidate by filters.
 *
 * Layout: isn_attribute_file_header, isn_attribute_entry [num_attributes], then each attribute's
 * column (num_docs values of `bits` bits, little-endian bit order, value = stored - 1 + base, stored 0 =
 * missing; 8 bytes of padding so a read is one unaligned 8-byte load) and, for keywords, its
 * dictionary (uint32 offsets [num_keywords + 1], then the keywords' bytes in strcmp order: id = rank).
 * The checksum (xxHash64) covers everything after the header. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/id_table.h"
#include "index/reader.h"
#include "index/section_buf.h"

#define ATTRIBUTE_MAGIC "ISNATTR1"
#define COLUMN_PADDING 8
/* Numbers span at most this many bits above the smallest, so that a value is one 8-byte load. */
#define MAX_VALUE_BITS 56

typedef struct {
    char magic[8];
    uint32_t num_docs;
    uint32_t num_attributes;
    uint64_t bytes; /* the whole file */
    uint64_t checksum;
} isn_attribute_file_header;

typedef struct isn_attribute_entry_s {
    char name[ISN_FIELD_NAME_MAX];
    uint32_t kind;
    uint32_t bits;
    int64_t base;
    uint64_t column_offset, column_bytes;
    uint64_t dictionary_offset, dictionary_bytes;
    uint32_t num_keywords;
    uint32_t pad;
} isn_attribute_entry;

/* ------------------------------------------------------------------ reading */

static uint32_t bits_for(uint64_t max) {
    uint32_t bits = 0;
    while (bits < 64 && (max >> bits)) bits++;
    return bits;
}

int isn_index_open_attributes(isn_index *ix, const char *dir, char *err, size_t err_len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, ISN_ATTRIBUTES_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        isn_error(err, err_len, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < sizeof(isn_attribute_file_header)) {
        close(fd);
        isn_error(err, err_len, "%s: truncated (no header)", path);
        return -1;
    }
    ix->attributes_bytes = (size_t)st.st_size;
    void *map = mmap(NULL, ix->attributes_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        isn_error(err, err_len, "%s: mmap: %s", path, strerror(errno));
        return -1;
    }
    ix->attributes_map = map;
    const isn_attribute_file_header *h = map;
    const uint8_t *bytes = map;
    uint64_t size = ix->attributes_bytes;
    if (memcmp(h->magic, ATTRIBUTE_MAGIC, 8) != 0 || h->bytes != size) {
        isn_error(err, err_len, "%s: not an attributes file of this version, or truncated", path);
        return -1;
    }
    if (isn_hash64(bytes + sizeof *h, size - sizeof *h) != h->checksum) {
        isn_error(err, err_len, "%s: checksum mismatch (the file is damaged)", path);
        return -1;
    }
    if (h->num_docs != ix->meta->num_docs || h->num_attributes > ISN_MAX_ATTRIBUTES ||
        sizeof *h + (uint64_t)h->num_attributes * sizeof(isn_attribute_entry) > size) {
        isn_error(err, err_len, "%s: made for another index (%u documents, %u attributes; the index has %u documents)",
                  path, h->num_docs, h->num_attributes, ix->meta->num_docs);
        return -1;
    }
    const isn_attribute_entry *entries = (const isn_attribute_entry *)(const void *)(bytes + sizeof *h);
    for (uint32_t a = 0; a < h->num_attributes; a++) {
        const isn_attribute_entry *e = &entries[a];
        uint64_t need = ((uint64_t)h->num_docs * e->bits + 7) / 8 + COLUMN_PADDING;
        bool ok = e->kind <= ISN_ATTRIBUTE_INT && e->bits <= MAX_VALUE_BITS && memchr(e->name, 0, sizeof e->name) &&
                  e->column_offset <= size && e->column_bytes <= size - e->column_offset && e->column_bytes >= need &&
                  e->dictionary_offset <= size && e->dictionary_bytes <= size - e->dictionary_offset &&
                  e->dictionary_offset % 4 == 0;
        if (ok && e->kind == ISN_ATTRIBUTE_KEYWORD) {
            uint64_t table = ((uint64_t)e->num_keywords + 1) * 4;
            ok = table <= e->dictionary_bytes;
            const uint32_t *offsets = (const uint32_t *)(const void *)(bytes + e->dictionary_offset);
            for (uint32_t k = 0; ok && k < e->num_keywords; k++) ok = offsets[k] <= offsets[k + 1];
            ok = ok && table + offsets[e->num_keywords] <= e->dictionary_bytes &&
                 (e->bits == 0 || bits_for(e->num_keywords) <= e->bits);
        }
        if (!ok) {
            isn_error(err, err_len, "%s: attribute %u is malformed", path, a);
            return -1;
        }
    }
    ix->attributes = entries;
    ix->num_attributes = h->num_attributes;
    for (uint32_t a = 0; a < h->num_attributes; a++) {
        if (entries[a].kind != ISN_ATTRIBUTE_KEYWORD) continue;
        uint32_t n = entries[a].num_keywords;
        uint32_t *starts = calloc((size_t)n + 2, sizeof *starts);
        uint32_t with = 0;
        for (uint32_t d = 0; starts && d < h->num_docs; d++) {
            int64_t v = isn_index_attribute_value(ix, a, d);
            /* a stored id past the dictionary would index outside it: the file is malformed */
            if (v != ISN_ATTRIBUTE_MISSING && (v < 0 || (uint64_t)v >= n)) {
                free(starts);
                isn_error(err, err_len, "%s: attribute %u holds a keyword id past its dictionary", path, a);
                return -1;
            }
            if (v != ISN_ATTRIBUTE_MISSING) {
                starts[v + 2]++;
                with++;
            }
        }
        uint32_t *docs = starts ? malloc((size_t)(with ? with : 1) * sizeof *docs) : NULL;
        if (!docs) {
            free(starts);
            isn_error(err, err_len, "out of memory for attribute %u's documents", a);
            return -1;
        }
        for (uint32_t k = 0; k < n; k++) starts[k + 2] += starts[k + 1];
        for (uint32_t d = 0; d < h->num_docs; d++) {
            int64_t v = isn_index_attribute_value(ix, a, d);
            if (v != ISN_ATTRIBUTE_MISSING) docs[starts[v + 1]++] = d;
        }
        ix->keyword_starts[a] = starts; /* starts[k] .. starts[k + 1] now */
        ix->keyword_docs[a] = docs;
    }
    return 0;
}

const uint32_t *isn_index_keyword_docs(const isn_index *ix, uint32_t attribute, int64_t id, uint32_t *count) {
    *count = 0;
    if (attribute >= ix->num_attributes || !ix->keyword_docs[attribute] || id < 0 ||
        (uint64_t)id >= ix->attributes[attribute].num_keywords)
        return NULL;
    const uint32_t *starts = ix->keyword_starts[attribute];
    *count = starts[id + 1] - starts[id];
    return ix->keyword_docs[attribute] + starts[id];
}

uint32_t isn_index_num_attributes(const isn_index *ix) { return ix->num_attributes; }

int isn_index_attribute_find(const isn_index *ix, const char *name, isn_attribute_kind *kind) {
    for (uint32_t a = 0; a < ix->num_attributes; a++)
        if (strcmp(ix->attributes[a].name, name) == 0) {
            if (kind) *kind = (isn_attribute_kind)ix->attributes[a].kind;
            return (int)a;
        }
    return -1;
}

const char *isn_index_attribute_name(const isn_index *ix, uint32_t attribute) {
    return attribute < ix->num_attributes ? ix->attributes[attribute].name : NULL;
}

bool isn_index_keyword_id(const isn_index *ix, uint32_t attribute, const char *value, size_t len, int64_t *id) {
    if (attribute >= ix->num_attributes) return false;
    const isn_attribute_entry *e = &ix->attributes[attribute];
    const uint32_t *offsets = (const uint32_t *)(const void *)(ix->attributes_map + e->dictionary_offset);
    const char *text = (const char *)(offsets + e->num_keywords + 1);
    uint32_t lo = 0, hi = e->num_keywords;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        size_t mlen = offsets[mid + 1] - offsets[mid];
        int c = memcmp(text + offsets[mid], value, mlen < len ? mlen : len);
        if (c == 0) c = mlen < len ? -1 : mlen > len;
        if (c == 0) {
            *id = mid;
            return true;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return false;
}

int64_t isn_index_attribute_value(const isn_index *ix, uint32_t attribute, uint32_t doc) {
    const isn_attribute_entry *e = &ix->attributes[attribute];
    if (e->bits == 0) return ISN_ATTRIBUTE_MISSING;
    uint64_t bit = (uint64_t)doc * e->bits, word;
    memcpy(&word, ix->attributes_map + e->column_offset + bit / 8, sizeof word);
    uint64_t stored = (word >> (bit % 8)) & ((1ull << e->bits) - 1);
    return stored ? e->base + (int64_t)(stored - 1) : ISN_ATTRIBUTE_MISSING;
}

/* ------------------------------------------------------------------ writing */

typedef struct {
    int64_t *values;  /* per doc; keyword: the first-seen number until sorted */
    id_table keywords; /* keyword attributes */
    bool keywords_ready;
} attribute_column;

static int parse_integer(const char *text, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end) return -1;
    *out = v;
    return 0;
}

/* One record's value for one attribute into the column; -1 (with why) when it has the wrong kind. */
static int take_value(const isn_attribute_spec *spec, attribute_column *column, json_t *value, uint32_t doc,
                      const char **why) {
    if (!value || json_is_null(value)) return 0;
    char number[32];
    if (spec->kind == ISN_ATTRIBUTE_KEYWORD) {
        const char *text;
        size_t len;
        if (json_is_string(value)) {
            text = json_string_value(value);
            len = json_string_length(value);
        } else if (json_is_integer(value)) {
            len = (size_t)snprintf(number, sizeof number, "%lld", (long long)json_integer_value(value));
            text = number;
        } else {
            *why = "a keyword attribute takes a string or an integer";
            return -1;
        }
        bool added;
        uint32_t id = id_table_intern(&column->keywords, text, len, &added);
        if (id == UINT32_MAX) {
            *why = "out of memory";
            return -1;
        }
        column->values[doc] = id;
        return 0;
    }
    int64_t v;
    if (json_is_integer(value)) v = json_integer_value(value);
    else if (!json_is_string(value) || parse_integer(json_string_value(value), &v) != 0) {
        *why = "an int attribute takes an integer (or a string of one)";
        return -1;
    }
    if (v == ISN_ATTRIBUTE_MISSING) {
        *why = "the smallest 64-bit integer stands for a missing value";
        return -1;
    }
    column->values[doc] = v;
    return 0;
}

static int keyword_order_cmp(const void *a, const void *b, void *ctx) {
    const id_table *t = ctx;
    size_t la, lb;
    const char *x = id_table_get(t, *(const uint32_t *)a, &la), *y = id_table_get(t, *(const uint32_t *)b, &lb);
    int c = memcmp(x, y, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* Zeros up to the next multiple of align (columns and dictionaries start 8-byte aligned). */
static int pad_to(out_buf *b, size_t align) {
    static const uint8_t zeros[8];
    return buf_put(b, zeros, (align - b->len % align) % align);
}

/* Appends one attribute's column (and dictionary) and fills its entry. */
static int write_column(out_buf *out, const isn_attribute_spec *spec, attribute_column *column, uint32_t num_docs,
                        isn_attribute_entry *entry, char *err, size_t err_len) {
    memset(entry, 0, sizeof *entry);
    snprintf(entry->name, sizeof entry->name, "%s", spec->name);
    entry->kind = spec->kind;
    int64_t *values = column->values;
    uint32_t *rank_of = NULL;
    if (spec->kind == ISN_ATTRIBUTE_KEYWORD) {
        uint32_t n = id_table_count(&column->keywords);
        uint32_t *order = malloc((n ? n : 1) * sizeof *order);
        rank_of = malloc((n ? n : 1) * sizeof *rank_of);
        if (!order || !rank_of) {
            free(order);
            free(rank_of);
            isn_error(err, err_len, "out of memory for attribute %s", spec->name);
            return -1;
        }
        for (uint32_t i = 0; i < n; i++) order[i] = i;
        qsort_r(order, n, sizeof *order, keyword_order_cmp, &column->keywords);
        for (uint32_t r = 0; r < n; r++) rank_of[order[r]] = r;
        if (pad_to(out, 8) != 0) goto oom;
        entry->dictionary_offset = out->len;
        entry->num_keywords = n;
        uint32_t at = 0;
        for (uint32_t r = 0; r <= n; r++) {
            if (buf_put(out, &at, 4) != 0) goto oom;
            if (r < n) {
                size_t len;
                id_table_get(&column->keywords, order[r], &len);
                at += (uint32_t)len;
            }
        }
        for (uint32_t r = 0; r < n; r++) {
            size_t len;
            const char *text = id_table_get(&column->keywords, order[r], &len);
            if (buf_put(out, text, len) != 0) goto oom;
        }
        entry->dictionary_bytes = out->len - entry->dictionary_offset;
        free(order);
        for (uint32_t d = 0; d < num_docs; d++)
            if (values[d] != ISN_ATTRIBUTE_MISSING) values[d] = rank_of[values[d]];
        free(rank_of);
        rank_of = NULL;
    }
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (uint32_t d = 0; d < num_docs; d++)
        if (values[d] != ISN_ATTRIBUTE_MISSING) {
            if (values[d] < lo) lo = values[d];
            if (values[d] > hi) hi = values[d];
        }
    entry->base = lo == INT64_MAX ? 0 : lo;
    uint64_t span = lo == INT64_MAX ? 0 : (uint64_t)hi - (uint64_t)lo + 1;
    entry->bits = lo == INT64_MAX ? 0 : bits_for(span);
    if (entry->bits > MAX_VALUE_BITS) {
        isn_error(err, err_len, "attribute %s: values from %lld to %lld span more than 2^%d", spec->name,
                  (long long)lo, (long long)hi, MAX_VALUE_BITS);
        return -1;
    }
    if (pad_to(out, 8) != 0) goto oom;
    entry->column_offset = out->len;
    entry->column_bytes = ((uint64_t)num_docs * entry->bits + 7) / 8 + COLUMN_PADDING;
    if (buf_reserve(out, entry->column_bytes) != 0) goto oom;
    memset(out->data + out->len, 0, entry->column_bytes);
    out->len += entry->column_bytes;
    uint8_t *column_bytes = out->data + entry->column_offset;
    for (uint32_t d = 0; d < num_docs && entry->bits; d++) {
        uint64_t stored = values[d] == ISN_ATTRIBUTE_MISSING ? 0 : (uint64_t)(values[d] - entry->base) + 1;
        uint64_t bit = (uint64_t)d * entry->bits, word;
        memcpy(&word, column_bytes + bit / 8, sizeof word);
        word |= stored << (bit % 8);
        memcpy(column_bytes + bit / 8, &word, sizeof word);
    }
    return 0;
oom:
    free(rank_of);
    isn_error(err, err_len, "out of memory for attribute %s", spec->name);
    return -1;
}

int isn_attributes_build(const char *input_path, const char *index_dir, const isn_build_options *options, char *err,
                         size_t err_len) {
    if (options->num_attributes > ISN_MAX_ATTRIBUTES) {
        isn_error(err, err_len, "%u attributes (at most %d)", options->num_attributes, ISN_MAX_ATTRIBUTES);
        return -1;
    }
    isn_index *ix = isn_index_open(index_dir, err, err_len);
    if (!ix) return -1;
    uint32_t num_docs = ix->meta->num_docs, num_attributes = options->num_attributes;
    int rc = -1;
    id_table ids;
    attribute_column columns[ISN_MAX_ATTRIBUTES];
    memset(columns, 0, sizeof columns);
    out_buf out = {0};
    FILE *in = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    if (id_table_init(&ids) != 0) {
        isn_index_close(ix);
        isn_error(err, err_len, "out of memory");
        return -1;
    }
    for (uint32_t d = 0; d < num_docs; d++) {
        size_t len;
        const char *id = isn_index_doc_id(ix, d, &len);
        bool added;
        if (id_table_intern(&ids, id, len, &added) != d) {
            isn_error(err, err_len, "%s: document %u's id is not unique or memory ran out", index_dir, d);
            goto done;
        }
    }
    for (uint32_t a = 0; a < num_attributes; a++) {
        columns[a].values = malloc((num_docs ? num_docs : 1) * sizeof(int64_t));
        if (!columns[a].values || id_table_init(&columns[a].keywords) != 0) {
            isn_error(err, err_len, "out of memory for attribute columns");
            goto done;
        }
        columns[a].keywords_ready = true;
        for (uint32_t d = 0; d < num_docs; d++) columns[a].values[d] = ISN_ATTRIBUTE_MISSING;
    }
    if (!(in = fopen(input_path, "r"))) {
        isn_error(err, err_len, "%s: %s", input_path, strerror(errno));
        goto done;
    }
    uint64_t line_number = 0;
    ssize_t got;
    while ((got = getline(&line, &line_cap, in)) >= 0) {
        line_number++;
        json_t *doc = json_loadb(line, (size_t)got, JSON_ALLOW_NUL, NULL);
        if (!doc) continue; /* the build reported it */
        json_t *jid = json_object_get(doc, options->id_field);
        char id_buf[32];
        const char *id = NULL;
        if (json_is_string(jid)) id = json_string_value(jid);
        else if (json_is_integer(jid)) {
            snprintf(id_buf, sizeof id_buf, "%lld", (long long)json_integer_value(jid));
            id = id_buf;
        }
        bool added = false;
        uint32_t doc_id = id ? id_table_intern(&ids, id, strlen(id), &added) : UINT32_MAX;
        if (doc_id < num_docs && !added) {
            for (uint32_t a = 0; a < num_attributes; a++) {
                const char *why = NULL;
                if (take_value(&options->attributes[a], &columns[a], json_object_get(doc, options->attributes[a].name),
                               doc_id, &why) != 0) {
                    fprintf(stderr, "isn-index: %s:%llu: attribute %s: %s%s\n", input_path,
                            (unsigned long long)line_number, options->attributes[a].name, why,
                            options->strict ? "" : " (left missing)");
                    if (options->strict || strcmp(why, "out of memory") == 0) {
                        isn_error(err, err_len, "%s:%llu: attribute %s: %s", input_path,
                                  (unsigned long long)line_number, options->attributes[a].name, why);
                        json_decref(doc);
                        goto done;
                    }
                }
            }
        }
        json_decref(doc);
    }
    isn_attribute_file_header header = {.num_docs = num_docs, .num_attributes = num_attributes};
    memcpy(header.magic, ATTRIBUTE_MAGIC, 8);
    isn_attribute_entry entries[ISN_MAX_ATTRIBUTES];
    memset(entries, 0, sizeof entries);
    if (buf_put(&out, &header, sizeof header) != 0 || buf_put(&out, entries, num_attributes * sizeof *entries) != 0) {
        isn_error(err, err_len, "out of memory");
        goto done;
    }
    for (uint32_t a = 0; a < num_attributes; a++)
        if (write_column(&out, &options->attributes[a], &columns[a], num_docs, &entries[a], err, err_len) != 0) goto done;
    memcpy(out.data + sizeof header, entries, num_attributes * sizeof *entries);
    isn_attribute_file_header *h = (isn_attribute_file_header *)(void *)out.data;
    h->bytes = out.len;
    h->checksum = isn_hash64(out.data + sizeof header, out.len - sizeof header);
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", index_dir, ISN_ATTRIBUTES_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(out.data, 1, out.len, f) != out.len || fclose(f) != 0 || rename(tmp, path) != 0) {
        isn_error(err, err_len, "%s: %s", path, strerror(errno));
        unlink(tmp);
        goto done;
    }
    rc = 0;
done:
    if (in) fclose(in);
    free(line);
    free(out.data);
    for (uint32_t a = 0; a < num_attributes; a++) {
        free(columns[a].values);
        if (columns[a].keywords_ready) id_table_free(&columns[a].keywords);
    }
    id_table_free(&ids);
    isn_index_close(ix);
    return rc;
}
