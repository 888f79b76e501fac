/* Query trees of optional terms alone (whole-document or field:), with filters and excluded clauses:
 * the bag of words' block-max MaxScore under an admit hook (its windows seeded by a scattered filter's
 * documents where the terms hold few postings among them), or a scattered filter's documents leading. */
#include "ranking/arena.h"
#include "ranking/structured_internal.h"


bool ranking_tree_terms_only(const evaluation *e) {
    for (uint32_t i = 0; i < e->num_scorers; i++)
        if (e->scorers[i].kind != SCORER_TERM) return false;
    return true;
}

/* A filter's documents that lie close together (a run of the doc ids, as documents of one source often
 * do): block-max MaxScore then skips the windows between them and prunes within them, where a leapfrog
 * would visit every one of them. Scattered ones are better leapfrogged. */
#define RANKING_DENSE_FILTER_SPAN 8u

/* The first and the last of a filter's documents (first ISN_DOC_END for none). */
static void docs_span(const scorer *docs, uint32_t *first, uint32_t *last) {
    *first = ISN_DOC_END;
    *last = 0;
    for (uint32_t i = 0; i < (docs->num_lists > 1 ? docs->num_lists : 1); i++) {
        const uint32_t *list = docs->num_lists > 1 ? docs->lists[i] : docs->docs;
        uint32_t size = docs->num_lists > 1 ? docs->list_sizes[i] : docs->size;
        if (!size) continue;
        if (list[0] < *first) *first = list[0];
        if (list[size - 1] > *last) *last = list[size - 1];
    }
}

bool ranking_tree_dense_docs(const scorer *docs) {
    uint32_t first, last;
    docs_span(docs, &first, &last);
    return first == ISN_DOC_END || (uint64_t)docs->size * RANKING_DENSE_FILTER_SPAN >= (uint64_t)(last - first) + 1;
}

/* The first block of the list whose last doc is at least doc (num_blocks when none). */
static uint32_t block_at(const isn_cursor *c, uint32_t doc) {
    uint32_t lo = 0, hi = c->num_blocks;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->blocks[mid].last_doc < doc) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* About how many postings the list holds between doc first and doc last: its blocks that reach there. */
static uint64_t postings_between(const isn_cursor *c, uint32_t first, uint32_t last) {
    uint32_t from = block_at(c, first);
    if (from == c->num_blocks) return 0;
    uint32_t to = block_at(c, last);
    if (to == c->num_blocks) to = c->num_blocks - 1;
    uint64_t blocks = to - from + 1;
    return blocks * ISN_BLOCK_SIZE < c->df ? blocks * ISN_BLOCK_SIZE : c->df;
}

uint64_t ranking_tree_postings_in_span(const evaluation *e, const scorer *docs) {
    uint32_t first, last;
    docs_span(docs, &first, &last);
    if (first == ISN_DOC_END) return 0;
    uint64_t postings = 0;
    for (uint32_t i = 0; i < e->num_scorers; i++) postings += postings_between(e->scorers[i].cursor, first, last);
    return postings;
}

static bool admit_doc(void *ctx, uint32_t doc) {
    evaluation *e = ctx;
    return (!e->guard || scorer_next_geq(e, e->guard, doc) == doc) && admitted(e, doc);
}

static uint32_t guard_next(void *ctx, uint32_t doc) {
    evaluation *e = ctx;
    return scorer_next_geq(e, e->guard, doc);
}

/* Under a seeding guard its documents are the only candidates: the rest of the tree is tested. */
static bool admit_seeded(void *ctx, uint32_t doc) {
    return admitted(ctx, doc);
}

/* Sets the bits (doc lo at bit 0) of the docs of docs[*at..size) in [lo, hi), and moves *at past them. */
static inline void seed_list(const uint32_t *docs, uint32_t size, uint32_t *at, uint32_t lo, uint32_t hi,
                             uint64_t *bits) {
    uint32_t i = *at;
    if (i < size && docs[i] < lo) gallop(docs, size, &i, lo);
    for (; i < size && docs[i] < hi; i++) {
        uint32_t bit = docs[i] - lo;
        bits[bit >> 6] |= UINT64_C(1) << (bit & 63);
    }
    *at = i;
}

/* ranking_run.seed under a leading filter (e->guard): its documents in [lo, hi), from one list or
 * several side by side; the guard is left on its first document from hi on. */
static void guard_seed(void *ctx, uint32_t lo, uint32_t hi, uint64_t *bits) {
    evaluation *e = ctx;
    scorer *g = e->guard;
    if (g->num_lists <= 1) {
        seed_list(g->docs, g->size, &g->at, lo, hi, bits);
        g->doc = g->at < g->size ? g->docs[g->at] : ISN_DOC_END;
        return;
    }
    g->doc = ISN_DOC_END;
    for (uint32_t i = 0; i < g->num_lists; i++) {
        seed_list(g->lists[i], g->list_sizes[i], &g->list_at[i], lo, hi, bits);
        if (g->list_at[i] < g->list_sizes[i] && g->lists[i][g->list_at[i]] < g->doc) g->doc = g->lists[i][g->list_at[i]];
    }
}

/* Optional terms (whole-document or field:) with filters or excluded clauses tested per candidate: the
 * bag of words' block-max MaxScore, each term under its own list's norms, its candidates admitted by the
 * tree (the same scores, summed the same way), its windows started at a leading filter's documents;
 * seeded, that filter's documents seed each inner window, the only candidates there. */
void ranking_tree_run_terms(evaluation *e, bool seeded) {
    ranking_run *run = e->run;
    ranking_arena *arena = &e->searcher->arena;
    uint32_t n = e->num_scorers;
    run->terms = ranking_arena_take(arena, n * sizeof(ranking_term));
    run->scratch_terms = ranking_arena_take(arena, n * sizeof(ranking_term));
    run->window_terms = ranking_arena_take(arena, n * sizeof(ranking_window_term));
    run->num_terms = n;
    for (uint32_t i = 0; i < n; i++) {
        const scorer *s = &e->scorers[i];
        float max_tf_part;
        if (s->whole_document) {
            isn_term_stats stats;
            isn_index_term_stats(e->index, s->terms[0].term_id, &stats);
            max_tf_part = stats.max_tf_part;
        } else {
            uint32_t df;
            isn_index_field_term_stats(e->index, s->terms[0].term_id, s->field, &df, &max_tf_part);
        }
        run->terms[i] = (ranking_term){.cursor = s->cursor, .weight = s->weight, .max_score = s->weight * max_tf_part};
        run->cursor_norms |= !s->whole_document;
    }
    if (e->num_filters || e->num_excluders || e->guard) {
        run->admit = admit_doc;
        run->admit_ctx = e;
    }
    if (e->guard) run->skip_to = guard_next;
    if (e->guard && seeded) {
        run->seed = guard_seed;
        run->seeded_admit = admit_seeded;
    }
    ranking_block_max_maxscore(run);
}

/* Guard documents taken at a time by run_guarded_terms. */
#define RANKING_GUARD_CHUNK 128u

/* The first of docs[from..to) that is >= target (to when none): galloping, then binary search. */
static inline uint32_t first_at_least(const uint32_t *docs, uint32_t from, uint32_t to, uint32_t target) {
    uint32_t lo = from, step = 1;
    while (lo + step < to && docs[lo + step] < target) {
        lo += step;
        step *= 2;
    }
    uint32_t hi = lo + step < to ? lo + step : to;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (docs[mid] < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Optional terms under a scattered keyword filter: the filter's documents lead, a chunk at a time; each
 * term that can still lift a document into the top k (MaxScore over the terms' bounds, smallest first)
 * is probed at every document of the chunk in one tight pass, and the documents some of them hold are
 * completed from the others while their partial score plus the others' bounds can still win. */
void ranking_tree_run_guarded_terms(evaluation *e) {
    ranking_run *run = e->run;
    scorer *s = e->scorers, *guard = e->guard;
    uint32_t n = e->num_scorers;
    double *prefix = run->scratch_bounds; /* prefix[i]: summed bounds of s[0..i) (ascending by bound) */
    prefix[0] = 0.0;
    for (uint32_t i = 0; i < n; i++) prefix[i + 1] = prefix[i] + s[i].max_score;
    uint32_t docs[RANKING_GUARD_CHUNK];
    double acc[RANKING_GUARD_CHUNK];
    bool hit[RANKING_GUARD_CHUNK];
    uint32_t doc = guard->doc;
    double *chunk_prefix = run->completion_bounds;
    while (doc != ISN_DOC_END) {
        if (ranking_should_stop(run, doc)) return;
        /* global bounds: nothing from doc on can win */
        if (ranking_bound_fails(prefix[n], ranking_prior_from(run, doc), &run->topk)) return;
        uint32_t m = 0;
        for (; m < RANKING_GUARD_CHUNK && doc != ISN_DOC_END; m++) {
            docs[m] = doc;
            acc[m] = 0.0;
            hit[m] = false;
            doc = scorer_next(e, guard);
        }
        /* the terms' bounds over the chunk's doc range: their blocks' maxima there */
        chunk_prefix[0] = 0.0;
        for (uint32_t i = 0; i < n; i++) {
            const isn_cursor *c = s[i].cursor;
            float best = 0.0f;
            for (uint32_t b = c->block; b < c->num_blocks; b++) {
                if (c->blocks[b].last_doc < docs[0]) continue;
                if (c->blocks[b].max_tf_part > best) best = c->blocks[b].max_tf_part;
                if (c->blocks[b].last_doc >= docs[m - 1]) break;
            }
            chunk_prefix[i + 1] = chunk_prefix[i] + (double)s[i].weight * best;
        }
        uint32_t first_essential = 0;
        const double prior = ranking_prior_from(run, docs[0]); /* the chunk's documents are from docs[0] on */
        while (first_essential < n && ranking_bound_fails(chunk_prefix[first_essential + 1], prior, &run->topk))
            first_essential++;
        if (first_essential == n) continue;
        for (uint32_t i = first_essential; i < n; i++) {
            isn_cursor *c = s[i].cursor;
            const float *norms = s[i].norms;
            float weight = s[i].weight;
            /* a leapfrog: where the term's next document lies past docs[j], the chunk's documents
             * before it are passed by a search, not probed one by one (most terms are sparse among a
             * filter's documents) */
            for (uint32_t j = 0; j < m;) {
                uint32_t d = ranking_next_geq(run, c, docs[j]);
                if (d == ISN_DOC_END) break;
                if (d != docs[j]) {
                    j = first_at_least(docs, j + 1, m, d);
                    continue;
                }
                run->postings_scored++;
                acc[j] += (double)(weight * isn_bm25_tf_part(e->k1_plus_1, isn_cursor_freq(c), norms[d]));
                hit[j] = true;
                j++;
            }
        }
        for (uint32_t j = 0; j < m; j++) {
            if (!hit[j] || !admitted(e, docs[j])) continue;
            run->matched++;
            double score = acc[j];
            bool pruned = false;
            const double own_prior = ranking_prior_of(run, docs[j]);
            for (uint32_t i = first_essential; i-- > 0;) {
                if (ranking_bound_fails(score + chunk_prefix[i + 1], own_prior, &run->topk)) {
                    pruned = true;
                    break;
                }
                isn_cursor *c = s[i].cursor;
                if (ranking_next_geq(run, c, docs[j]) == docs[j]) {
                    run->postings_scored++;
                    score += (double)(s[i].weight * isn_bm25_tf_part(e->k1_plus_1, isn_cursor_freq(c), s[i].norms[docs[j]]));
                }
            }
            if (pruned) continue;
            run->docs_evaluated++;
            isn_topk_offer(&run->topk, docs[j], ranking_final_score(run, docs[j], score));
        }
    }
}

