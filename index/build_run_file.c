/* Run files of the bounded-memory build: written from a builder's run, read back term by term. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/build_runs.h"
#include "index/format.h"

#define RUN_WRITE_BUFFER (1u << 20)

static int cmp_term_text(const void *a, const void *b, void *ctx) {
    const isn_strtab *terms = ctx;
    size_t la, lb;
    const char *sa = isn_strtab_get(terms, *(const uint32_t *)a, &la);
    const char *sb = isn_strtab_get(terms, *(const uint32_t *)b, &lb);
    int c = memcmp(sa, sb, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* The term's posting data into scratch. */
static int encode_list(const isn_build_list *l, bool with_positions, byte_buffer *scratch) {
    scratch->len = 0;
    const uint32_t *pos = l->positions;
    uint32_t prev = 0;
    for (uint32_t i = 0; i < l->num_postings; i++) {
        uint32_t doc = l->postings[2 * i], tf = l->postings[2 * i + 1];
        if (!buffer_reserve(scratch, 10 + (with_positions ? (size_t)tf * 5 : 0))) return -1;
        uint8_t *o = (uint8_t *)scratch->data + scratch->len;
        o = isn_varint_put(o, i ? doc - prev : doc);
        o = isn_varint_put(o, tf);
        prev = doc;
        if (with_positions) {
            uint32_t last = 0;
            for (uint32_t j = 0; j < tf; j++) {
                o = isn_varint_put(o, pos[j] - last);
                last = pos[j];
            }
            pos += tf;
        }
        scratch->len = (size_t)(o - (uint8_t *)scratch->data);
    }
    return 0;
}

void run_info_free(run_info *run) {
    free(run->sample_offsets);
    free(run->sample_text);
    free(run->sample_bytes);
    run->sample_offsets = NULL;
    run->sample_text = NULL;
    run->sample_bytes = NULL;
    run->num_samples = 0;
}

int run_write(const isn_builder *b, run_info *run, byte_buffer *scratch, char *err, size_t err_len) {
    const char *path = run->path;
    uint32_t nt = isn_strtab_count(&b->terms);
    uint32_t *order = malloc((size_t)(nt ? nt : 1) * sizeof *order);
    char *wbuf = malloc(RUN_WRITE_BUFFER);
    uint32_t samples = (nt + RUN_SAMPLE_TERMS - 1) / RUN_SAMPLE_TERMS;
    run->num_samples = 0;
    run->sample_offsets = malloc((size_t)(samples ? samples : 1) * sizeof *run->sample_offsets);
    run->sample_text = malloc(((size_t)samples + 1) * sizeof *run->sample_text);
    run->sample_bytes = malloc((size_t)(samples ? samples : 1) * ISN_MAX_TERM_BYTES);
    FILE *f = NULL;
    int rc = -1;
    if (!order || !wbuf || !run->sample_offsets || !run->sample_text || !run->sample_bytes) {
        isn_error(err, err_len, "out of memory while writing run %s", path);
        goto done;
    }
    for (uint32_t t = 0; t < nt; t++) order[t] = t;
    qsort_r(order, nt, sizeof *order, cmp_term_text, (void *)&b->terms);
    f = fopen(path, "wb");
    if (!f) {
        isn_error(err, err_len, "cannot create run file %s: %s", path, strerror(errno));
        goto done;
    }
    setvbuf(f, wbuf, _IOFBF, RUN_WRITE_BUFFER);
    bool ok = true;
    uint64_t at = 0;
    run->sample_text[0] = 0;
    for (uint32_t r = 0; ok && r < nt; r++) {
        uint32_t t = order[r];
        size_t len;
        const char *s = isn_strtab_get(&b->terms, t, &len);
        if (r % RUN_SAMPLE_TERMS == 0) {
            uint32_t k = run->num_samples++;
            run->sample_offsets[k] = at;
            memcpy(run->sample_bytes + run->sample_text[k], s, len);
            run->sample_text[k + 1] = run->sample_text[k] + (uint32_t)len;
        }
        if (encode_list(&b->lists[t], b->options.positions, scratch) != 0) {
            isn_error(err, err_len, "out of memory while writing run %s", path);
            goto done;
        }
        uint8_t head[1 + 255 + 15], *h = head;
        *h++ = (uint8_t)len;
        memcpy(h, s, len);
        h += len;
        h = isn_varint_put(h, t);
        h = isn_varint_put(h, b->lists[t].num_postings);
        uint64_t n = scratch->len;
        /* data_bytes as a varint of up to 10 bytes (a list may pass 4 GiB) */
        while (n >= 0x80) {
            *h++ = (uint8_t)(n | 0x80);
            n >>= 7;
        }
        *h++ = (uint8_t)n;
        ok = fwrite(head, 1, (size_t)(h - head), f) == (size_t)(h - head) &&
             fwrite(scratch->data, 1, scratch->len, f) == scratch->len;
        at += (uint64_t)(h - head) + scratch->len;
    }
    static const uint8_t end = 0;
    if (ok) ok = fwrite(&end, 1, 1, f) == 1;
    if (ok) {
        ok = fflush(f) == 0;
        run->bytes = at + 1;
    }
    if (fclose(f) != 0) ok = false;
    f = NULL;
    if (!ok) {
        isn_error(err, err_len, "cannot write run file %s: %s", path, strerror(errno ? errno : EIO));
        unlink(path);
        goto done;
    }
    rc = 0;
done:
    if (f) {
        fclose(f);
        unlink(path);
    }
    if (rc != 0) run_info_free(run);
    free(order);
    free(wbuf);
    return rc;
}

FILE *build_temp_file(const char *dir, const char *prefix, char *err, size_t err_len) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s-XXXXXX", dir, prefix);
    int fd = mkstemp(path);
    if (fd < 0) {
        isn_error(err, err_len, "cannot create a temporary file in %s: %s", dir, strerror(errno));
        return NULL;
    }
    unlink(path);
    FILE *f = fdopen(fd, "w+b");
    if (!f) {
        isn_error(err, err_len, "cannot open a temporary file in %s: %s", dir, strerror(errno));
        close(fd);
    }
    return f;
}

/* ------------------------------------------------------------------ reading */

int run_cursor_open(run_cursor *c, const run_info *run, uint32_t index, size_t buffer_bytes, uint64_t offset) {
    memset(c, 0, sizeof *c);
    c->file_pos = offset;
    c->fd = open(run->path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0) return -1;
    c->file_bytes = run->bytes;
    c->index = index;
    c->cap = buffer_bytes < 4096 ? 4096 : buffer_bytes;
    c->buf = malloc(c->cap);
    if (!c->buf) {
        close(c->fd);
        c->fd = -1;
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

void run_cursor_close(run_cursor *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->buf);
    c->fd = -1;
    c->buf = NULL;
}

/* Makes at least `want` bytes available at c->at (fewer only at the end of the file). */
static int fill(run_cursor *c, size_t want) {
    if (c->len - c->at >= want) return 0;
    memmove(c->buf, c->buf + c->at, c->len - c->at);
    c->len -= c->at;
    c->at = 0;
    while (c->len < c->cap && c->file_pos < c->file_bytes) {
        size_t room = c->cap - c->len;
        if (room > c->file_bytes - c->file_pos) room = (size_t)(c->file_bytes - c->file_pos);
        ssize_t got = pread(c->fd, c->buf + c->len, room, (off_t)c->file_pos);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            c->error = got < 0 ? errno : EIO;
            return -1;
        }
        c->len += (size_t)got;
        c->file_pos += (uint64_t)got;
        if (c->len - c->at >= want) break;
    }
    return 0;
}

static inline int get_varint64(run_cursor *c, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (c->at == c->len) {
            c->error = EINVAL;
            return -1;
        }
        uint8_t byte = c->buf[c->at++];
        x |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return 0;
        }
    }
    c->error = EINVAL;
    return -1;
}

int run_cursor_next_term(run_cursor *c) {
    if (c->done) return 0;
    if (fill(c, 1 + 255 + 20) != 0) return -1;
    if (c->at == c->len) {
        c->error = EINVAL; /* a run ends with a 0 byte */
        return -1;
    }
    uint8_t len = c->buf[c->at++];
    if (len == 0) {
        c->done = true;
        return 0;
    }
    if (c->len - c->at < len) {
        c->error = EINVAL;
        return -1;
    }
    memcpy(c->term, c->buf + c->at, len);
    c->at += len;
    c->term_len = len;
    uint64_t id, df;
    if (get_varint64(c, &id) != 0 || get_varint64(c, &df) != 0 || get_varint64(c, &c->data_bytes) != 0) return -1;
    c->local_id = (uint32_t)id;
    c->df = (uint32_t)df;
    return 0;
}

int run_cursor_skip_postings(run_cursor *c) {
    uint64_t left = c->data_bytes;
    uint64_t in_buffer = c->len - c->at;
    if (left <= in_buffer) {
        c->at += (size_t)left;
        return 0;
    }
    left -= in_buffer;
    c->at = c->len = 0;
    if (left > c->file_bytes - c->file_pos) {
        c->error = EINVAL;
        return -1;
    }
    c->file_pos += left;
    return 0;
}

static int grow64(void **p, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return 0;
    uint64_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Varints of up to 5 bytes from buf (the caller made 5 bytes readable). */
static inline uint32_t take_varint(const uint8_t **p) {
    const uint8_t *q = *p;
    uint32_t x = q[0] & 0x7f;
    if (q[0] < 0x80) {
        *p = q + 1;
        return x;
    }
    int i = 1;
    for (int shift = 7; i < 5; i++, shift += 7) {
        x |= (uint32_t)(q[i] & 0x7f) << shift;
        if (q[i] < 0x80) break;
    }
    *p = q + i + 1;
    return x;
}

int run_cursor_read_postings(run_cursor *c, bool with_positions, uint32_t **triples, uint64_t *triples_len,
                             uint64_t *triples_cap, uint32_t **positions, uint64_t *positions_len,
                             uint64_t *positions_cap) {
    if (grow64((void **)triples, triples_cap, 3 * (*triples_len / 3 + c->df), sizeof **triples) != 0) {
        c->error = ENOMEM;
        return -1;
    }
    uint32_t *t = *triples + *triples_len;
    uint32_t doc = 0;
    uint64_t end_left = c->data_bytes; /* bytes of this term's data not yet consumed */
    for (uint32_t i = 0; i < c->df; i++) {
        if (fill(c, 10) != 0) return -1;
        const uint8_t *p = c->buf + c->at;
        uint32_t gap = take_varint(&p), tf = take_varint(&p);
        size_t used = (size_t)(p - (c->buf + c->at));
        if (used > c->len - c->at || used > end_left || tf == 0) {
            c->error = EINVAL;
            return -1;
        }
        c->at += used;
        end_left -= used;
        doc = i ? doc + gap : gap;
        t[3 * i] = doc;
        t[3 * i + 1] = tf;
        t[3 * i + 2] = (uint32_t)*positions_len;
        if (!with_positions) continue;
        if (grow64((void **)positions, positions_cap, *positions_len + tf, sizeof **positions) != 0) {
            c->error = ENOMEM;
            return -1;
        }
        uint32_t *o = *positions + *positions_len, code = 0;
        for (uint32_t j = 0; j < tf; j++) {
            if (fill(c, 5) != 0) return -1;
            const uint8_t *q = c->buf + c->at;
            code += take_varint(&q);
            used = (size_t)(q - (c->buf + c->at));
            if (used > c->len - c->at || used > end_left) {
                c->error = EINVAL;
                return -1;
            }
            c->at += used;
            end_left -= used;
            o[j] = code;
        }
        *positions_len += tf;
    }
    if (end_left != 0) {
        c->error = EINVAL;
        return -1;
    }
    *triples_len += 3 * (uint64_t)c->df;
    return 0;
}
