/* Private to ranking/: searcher state, the per-query execution context shared by the algorithms,
 * and the small inline helpers they all use (scoring one posting, counted cursor moves). */
#ifndef ISN_RANKING_INTERNAL_H
#define ISN_RANKING_INTERNAL_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "ranking/ranking.h"

/* Bounds are inflated by this factor before being compared with the threshold, so that float
 * rounding of a score can never make a pruned document one that belongs in the top-k. */
#define RANKING_BOUND_SLACK (1.0 + 1e-6)

/* Query-term dedup table of isn_query_parse: open addressing, comfortably above ISN_MAX_QUERY_TERMS. */
#define RANKING_PARSE_SLOTS 4096u

typedef struct {
    uint32_t generation; /* slot is live only when equal to the searcher's parse generation */
    uint32_t term_id;
    uint32_t index; /* into the parsed term array */
} ranking_parse_slot;

/* Bump arena for one query: reset at the start of each search, grown only when a query needs more
 * than it has ever needed (more terms or a larger k). A take beyond what the search reserved is a
 * sizing bug: it is still served (from the capacity's slack, else from the heap until the next reset),
 * so that a miscount costs an allocation, never another piece's memory, and ranking_arena_overrun
 * says by how much. */
typedef struct ranking_arena_spill ranking_arena_spill;
typedef struct {
    uint8_t *base;
    size_t capacity;
    size_t reserved;
    size_t used;
    ranking_arena_spill *spills;
} ranking_arena;

/* Doc ids one window of the block-max MaxScore scores at once (Lucene's inner window; on the Debian
 * logs 8192 was a little faster than 4096 and 16384, and 2048 slower). */
#define RANKING_WINDOW_DOCS 8192u

/* The window's score accumulator: scores[i] belongs to doc window_min + i, set bits mark the docs
 * that some essential list holds. All zero between windows. The candidates that may still win are
 * then completed together, one non-essential list at a time, in cand_docs / cand_scores. */
typedef struct {
    double scores[RANKING_WINDOW_DOCS];
    uint64_t bits[RANKING_WINDOW_DOCS / 64];
    uint32_t cand_docs[RANKING_WINDOW_DOCS];
    double cand_scores[RANKING_WINDOW_DOCS];
    /* Under a seeding filter (ranking_run.seed): the docs it keeps, the only ones the lists add to.
     * All zero between windows. */
    uint64_t seeds[RANKING_WINDOW_DOCS / 64];
    uint8_t on_seed[ISN_BLOCK_SIZE]; /* a block's postings on seeds, by position in the block */
} ranking_window;

/* ------------------------------------------------------------------ query trees (query_structure.c) */

/* One clause of a compiled query tree: the public layout (ranking.h), named for ranking's own use. */
typedef isn_tree_clause ranking_clause;

#define RANKING_WHOLE_DOCUMENT ISN_TREE_WHOLE_DOCUMENT

typedef isn_tree_term ranking_clause_term;
typedef isn_tree_filter ranking_filter;

/* The header of the flat block; the arrays follow it, each 8-byte aligned. */
struct isn_query_structure {
    uint32_t num_clauses, num_terms, num_filters, num_values;
};

static inline size_t ranking_align8(size_t bytes) { return (bytes + 7) & ~(size_t)7; }

static inline ranking_clause *ranking_structure_clauses(const isn_query_structure *s) {
    return (ranking_clause *)(void *)((uint8_t *)(uintptr_t)s + sizeof *s);
}
static inline ranking_clause_term *ranking_structure_terms(const isn_query_structure *s) {
    return (ranking_clause_term *)(void *)((uint8_t *)ranking_structure_clauses(s) +
                                           s->num_clauses * sizeof(ranking_clause));
}
static inline ranking_filter *ranking_structure_filters(const isn_query_structure *s) {
    return (ranking_filter *)(void *)((uint8_t *)ranking_structure_terms(s) +
                                      ranking_align8(s->num_terms * sizeof(ranking_clause_term)));
}
static inline int64_t *ranking_structure_values(const isn_query_structure *s) {
    return (int64_t *)(void *)((uint8_t *)ranking_structure_filters(s) + s->num_filters * sizeof(ranking_filter));
}
static inline size_t ranking_structure_size(uint32_t clauses, uint32_t terms, uint32_t filters, uint32_t values) {
    return sizeof(isn_query_structure) + clauses * sizeof(ranking_clause) +
           ranking_align8(terms * sizeof(ranking_clause_term)) + filters * sizeof(ranking_filter) +
           values * sizeof(int64_t);
}

struct isn_searcher {
    ranking_window window;
    const isn_index *index;
    const float *norms;
    float k1_plus_1;
    uint32_t index_num_docs;
    isn_analyzer *analyzer;
    ranking_arena arena;
    isn_query_term *parsed_terms; /* ISN_MAX_QUERY_TERMS entries, owned by the searcher */
    ranking_parse_slot *parse_slots;
    uint32_t parse_generation;
    /* Query trees: the compiled tree (grown on demand), analysis scratch, per-field statistics. */
    isn_query_structure *structure;
    size_t structure_capacity;
    void *query_scratch; /* query_structure.c's, allocated at the first query tree */
    uint32_t *position_scratch; /* RANKING_PHRASE_POSITIONS per phrase term */
    uint32_t position_scratch_terms;
};

/* Terms of one phrase at most (a phrase match keeps per-term state on the stack). */
#define RANKING_MAX_PHRASE_TERMS 64u

/* Positions of one term in one field that a phrase match reads; more are ignored. */
#define RANKING_PHRASE_POSITIONS 1024u


/* One query term as the algorithms see it. Algorithms reorder arrays of these freely. */
typedef struct {
    isn_cursor *cursor;
    float weight;    /* idf * count */
    float max_score; /* weight * the list's max_tf_part: upper bound of the term's contribution */
} ranking_term;

/* A term as the windowed block-max MaxScore keeps it. */
typedef struct {
    ranking_term term;
    double bound;         /* the term's bound over the current outer window */
    uint32_t bound_block; /* first block of the list that may overlap the window (only moves forward) */
    float postings;       /* about how many postings the list holds in the window */
    bool nonessential;    /* scratch of the partition */
} ranking_window_term;

/* Top-k collection for large k, where a heap pays a sift of log k levels for each of the many
 * documents that enter it: a document is appended (as one sortable key) when it beats the k-th best
 * score known so far, and the buffer is cut back to its best k by selection when full (twice k),
 * which also raises the threshold. The kept set is exactly the heap's (score descending, then doc
 * ascending), as documents arrive in increasing id. */
typedef struct {
    uint64_t *keys;    /* capacity entries; NULL: the algorithm offers to the heap instead */
    uint32_t size;
    uint32_t capacity; /* 2k */
    uint32_t k;
    uint32_t next_compaction; /* k the first time (to learn a threshold early), then capacity */
    bool have_kth;
    float kth; /* the k-th best score seen so far, once have_kth */
} ranking_topk_buffer;

/* Below this k the heap is cheaper. */
#define RANKING_BUFFER_MIN_K 64u

/* One key per hit, larger = better: the score's bits mapped to an order-preserving unsigned integer
 * above, the complemented doc below (a lower doc wins a tie). */
static inline uint64_t ranking_hit_key(uint32_t doc, float score) {
    uint32_t bits;
    memcpy(&bits, &score, sizeof bits);
    bits = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
    return (uint64_t)bits << 32 | (uint32_t)~doc;
}

static inline float ranking_key_score(uint64_t key) {
    uint32_t bits = (uint32_t)(key >> 32);
    bits = (bits & 0x80000000u) ? bits & 0x7FFFFFFFu : ~bits;
    float score;
    memcpy(&score, &bits, sizeof score);
    return score;
}

static inline uint32_t ranking_key_doc(uint64_t key) { return ~(uint32_t)key; }

/* What every algorithm runs on. */
typedef struct {
    ranking_term *terms;
    uint32_t num_terms;
    const float *norms;
    float k1_plus_1;
    isn_topk topk;
    ranking_topk_buffer buffer; /* used by the algorithms that call ranking_collect, for large k */
    ranking_window *window;     /* the searcher's */
    /* Per-query scratch, num_terms entries each, from the arena. */
    ranking_term *scratch_terms;
    double *scratch_bounds;
    double *completion_bounds;
    ranking_window_term *window_terms;
    /* Counters, copied into isn_search_stats at the end. */
    uint64_t postings_scored;
    uint64_t docs_evaluated;
    uint64_t blocks_decoded;
    uint64_t matched;
    /* Early termination: 0 = never; otherwise the clock is read every RANKING_CLOCK_CHECK_EVERY
     * candidates, and once past stop_ns the algorithm leaves its loop. */
    uint64_t stop_ns;
    uint32_t until_clock_check;
    bool stopped;
    uint32_t stopped_before_doc; /* every doc below it was considered when the run stopped */
    /* Block-max MaxScore under a query tree's filters and excluded clauses: a candidate that can still
     * win is offered only when this admits it (then alone counted as matched). NULL for none. */
    bool (*admit)(void *ctx, uint32_t doc);
    void *admit_ctx;
    /* With admit: the first doc >= doc it may admit (a filter's next document), so that windows without
     * one are skipped whole; NULL for none. Called with docs in increasing order, as admit is. */
    uint32_t (*skip_to)(void *ctx, uint32_t doc);
    /* With admit and skip_to: sets the inner window's seed bits (window.seeds, doc lo at bit 0) for
     * the docs in [lo, hi) that a leading filter keeps, so that the essential lists' postings become
     * candidates only there, a bit test each in their tight pass, instead of every one a candidate
     * tested by admit (a filter of few documents); seeded_admit then tests the candidates for the
     * rest of the tree (admit still tests those of windows that one list leads). NULL for none.
     * Called with increasing windows. */
    void (*seed)(void *ctx, uint32_t lo, uint32_t hi, uint64_t *bits);
    bool (*seeded_admit)(void *ctx, uint32_t doc);
    /* Block-max MaxScore scores each term under its cursor's norms (a query tree's field: terms) instead
     * of `norms`. */
    bool cursor_norms;
    /* Safe early termination on an index in global order (index.h isn_index_score_bounds): no document
     * from id d on scores above bound_scale * score_bounds[d], so once the top k is full and that is not
     * above its threshold the run is over, its answer exact. NULL: no bounds (or not usable). */
    const float *score_bounds;
    double bound_scale;
    uint32_t bound_docs; /* score_bounds' length */
    bool bound_ended;    /* the run ended there */
    /* With a prior (isn_search_options.prior_weight > 0) but no score bounds, the same early end with
     * bound_scale the query's whole bound (its terms' maxima summed, with the slack) plus the prior's. */
    bool settles;
    /* A static prior (isn_search_options.prior_weight > 0): the index's static scores and their suffix
     * maxima (isn_index_prior_bounds), prior_docs of each; NULL without one (then nothing below adds). */
    const float *prior;
    const float *prior_bounds;
    float prior_weight;
    uint32_t prior_docs;
} ranking_run;

/* What the prior adds at most to any document from doc on (ISN_DOC_END: past the last; no document is
 * left, and the last one's bound still holds); 0 without a prior. For a decision that passes over
 * documents from doc on. */
static inline double ranking_prior_from(const ranking_run *run, uint32_t doc) {
    if (!run->prior)
        return 0.0;
    return isn_prior_bound(run->prior_weight, run->prior_bounds[doc < run->prior_docs ? doc : run->prior_docs - 1]);
}

/* What the prior adds at most to doc alone (a candidate); 0 without a prior. */
static inline double ranking_prior_of(const ranking_run *run, uint32_t doc) {
    return run->prior ? isn_prior_bound(run->prior_weight, run->prior[doc]) : 0.0;
}

/* A matching document's score as the top k receives it: its BM25 summed in double, with the prior. */
static inline float ranking_final_score(const ranking_run *run, uint32_t doc, double bm25) {
    return run->prior ? isn_prior_score((float)bm25, run->prior_weight, run->prior[doc]) : (float)bm25;
}

/* Whether the top k is full (or, kept in the buffer, its k-th score known): the threshold is a final
 * k-th score's lower bound. */
static inline bool ranking_topk_known(const ranking_run *run) {
    return run->buffer.keys ? run->buffer.have_kth : run->topk.size == run->topk.capacity;
}

/* Candidates between clock reads: a read costs ~20 ns, a candidate ~50-500 ns. */
#define RANKING_CLOCK_CHECK_EVERY 256u

/* Called by the algorithms at the top of their candidate loop; next_doc is the smallest doc not yet
 * considered. True means stop now (run->stopped is set). */
/* Whether no document from next_doc on can enter the full top k (score_bounds): the run ends, complete. A seed
 * (isn_topk.floor) bounds the final k-th score from below before the top k is full, so no document from there on
 * that cannot reach it is an answer either: a search from first_doc seeded with the k-th score of the documents
 * before it (the GPU's completion of a partly resident query) ends where they can no longer reach that score, not
 * only once it has found k documents of its own. */
static inline bool ranking_bounds_settle(ranking_run *run, uint32_t next_doc) {
    if (!run->settles || next_doc >= run->bound_docs)
        return false;
    const double threshold = ranking_topk_known(run) ? run->topk.threshold : run->topk.floor;
    if (threshold == -INFINITY)
        return false;
    double bound = run->score_bounds ? run->bound_scale * (double)run->score_bounds[next_doc] : run->bound_scale;
    if (bound + ranking_prior_from(run, next_doc) > threshold)
        return false;
    run->bound_ended = true;
    return true;
}

static inline bool ranking_should_stop(ranking_run *run, uint32_t next_doc) {
    if (ranking_bounds_settle(run, next_doc))
        return true;
    if (!run->stop_ns || --run->until_clock_check)
        return false;
    run->until_clock_check = RANKING_CLOCK_CHECK_EVERY;
    if (isn_now_ns() < run->stop_ns)
        return false;
    run->stopped = true;
    run->stopped_before_doc = next_doc;
    return true;
}

/* Contribution of the term at the cursor's current posting, in float as the index computes maxima. */
static inline double ranking_term_score(ranking_run *run, const ranking_term *term, uint32_t doc) {
    run->postings_scored++;
    float tf_part = isn_bm25_tf_part(run->k1_plus_1, isn_cursor_freq(term->cursor), run->norms[doc]);
    return (double)(term->weight * tf_part);
}

/* Cursor moves that count decoded blocks: a move decodes at most one block (the one it lands in). */
static inline uint32_t ranking_next(ranking_run *run, isn_cursor *cursor) {
    uint32_t before = cursor->decoded_block;
    uint32_t doc = isn_cursor_next(cursor);
    run->blocks_decoded += cursor->decoded_block != before;
    return doc;
}

static inline uint32_t ranking_next_geq(ranking_run *run, isn_cursor *cursor, uint32_t target) {
    uint32_t before = cursor->decoded_block;
    uint32_t doc = isn_cursor_next_geq(cursor, target);
    run->blocks_decoded += cursor->decoded_block != before;
    return doc;
}

/* Conjunctive step: moves terms[1..n) to `doc`; returns doc when all hold it, else the first doc one of
 * them landed on past it (the next candidate; ISN_DOC_END when a list ran out). */
static inline uint32_t ranking_align_followers(ranking_run *run, ranking_term *terms, uint32_t n, uint32_t doc) {
    for (uint32_t i = 1; i < n; i++) {
        uint32_t found = ranking_next_geq(run, terms[i].cursor, doc);
        if (found != doc)
            return found;
    }
    return doc;
}

/* Whether documents whose BM25 is at most bound and whose prior adds at most prior (ranking_prior_from
 * or ranking_prior_of; 0 without one) cannot enter the top k. */
static inline bool ranking_bound_fails(double bound, double prior, const isn_topk *topk) {
    return bound * RANKING_BOUND_SLACK + prior <= topk->threshold;
}

/* A fully scored document: counted and offered to the top-k; true when it entered. */
static inline bool ranking_offer_scored(ranking_run *run, uint32_t doc, double score) {
    run->docs_evaluated++;
    run->matched++;
    return isn_topk_offer(&run->topk, doc, ranking_final_score(run, doc, score));
}

/* The smallest doc on which terms[from..n) sit: the first candidate of a disjunction. */
static inline uint32_t ranking_min_doc(const ranking_term *terms, uint32_t from, uint32_t n) {
    uint32_t doc = ISN_DOC_END;
    for (uint32_t i = from; i < n; i++)
        if (terms[i].cursor->doc < doc)
            doc = terms[i].cursor->doc;
    return doc;
}

/* Disjunctive step over terms[from..n): adds the score of every list sitting on `doc`, moves those lists
 * on, and sets *next_doc to the smallest doc the lists then sit on (the next candidate). */
static inline double ranking_score_or_step(ranking_run *run, ranking_term *terms, uint32_t from, uint32_t n,
                                           uint32_t doc, uint32_t *next_doc) {
    double score = 0.0;
    uint32_t next = ISN_DOC_END;
    for (uint32_t i = from; i < n; i++) {
        isn_cursor *cursor = terms[i].cursor;
        if (cursor->doc == doc) {
            score += ranking_term_score(run, &terms[i], doc);
            ranking_next(run, cursor);
        }
        if (cursor->doc < next)
            next = cursor->doc;
    }
    *next_doc = next;
    return score;
}

/* Conjunctive step on the lead list's candidate `doc` (terms sorted by df, lead = terms[0].cursor, passed
 * in so that the loop keeps it in a register): when every list holds it, scores and offers it; returns
 * the lead's next candidate (ISN_DOC_END: done). */
static inline uint32_t ranking_and_step(ranking_run *run, ranking_term *terms, uint32_t n, isn_cursor *lead,
                                        uint32_t doc) {
    uint32_t found = ranking_align_followers(run, terms, n, doc);
    if (found != doc)
        return found == ISN_DOC_END ? ISN_DOC_END : ranking_next_geq(run, lead, found);
    double score = 0.0;
    for (uint32_t j = 0; j < n; j++)
        score += ranking_term_score(run, &terms[j], doc);
    ranking_offer_scored(run, doc, score);
    return ranking_next(run, lead);
}

/* Restores doc order after terms[at] moved forward, given that the rest was sorted: it sinks right. */
static inline void ranking_sink_term(ranking_term *terms, uint32_t at, uint32_t n) {
    ranking_term moving = terms[at];
    uint32_t doc = moving.cursor->doc;
    while (at + 1 < n && terms[at + 1].cursor->doc < doc) {
        terms[at] = terms[at + 1];
        at++;
    }
    terms[at] = moving;
}

/* The same after terms[0..count) all moved forward: each sinks into the sorted rest, which costs far
 * less than a full sort since most of them move a few places. */
static inline void ranking_resort_prefix(ranking_term *terms, uint32_t count, uint32_t n) {
    for (uint32_t i = count; i-- > 0;)
        ranking_sink_term(terms, i, n);
}

void ranking_buffer_compact(ranking_run *run);
/* Leaves the best k in topk.entries, best first (no isn_topk_sort after it). */
void ranking_buffer_finish(ranking_run *run);

/* A fully scored document, to the buffer when the run has one, else to the heap. */
static inline void ranking_collect(ranking_run *run, uint32_t doc, float score) {
    ranking_topk_buffer *b = &run->buffer;
    if (!b->keys) {
        isn_topk_offer(&run->topk, doc, score);
        return;
    }
    if (b->have_kth && !(score > b->kth))
        return;
    b->keys[b->size++] = ranking_hit_key(doc, score);
    if (b->size == b->next_compaction)
        ranking_buffer_compact(run);
}

void ranking_sort_terms_by_doc(ranking_term *terms, uint32_t n);
void ranking_sort_terms_by_df(ranking_term *terms, uint32_t n);
void ranking_sort_terms_by_max_score(ranking_term *terms, uint32_t n);

/* The algorithms. Each visits documents in increasing id and offers them to run->topk. */
void ranking_exhaustive_or(ranking_run *run);
void ranking_exhaustive_and(ranking_run *run);
void ranking_maxscore(ranking_run *run);
void ranking_wand(ranking_run *run);
void ranking_block_max_wand(ranking_run *run);
void ranking_block_max_and(ranking_run *run);
void ranking_block_max_maxscore(ranking_run *run);

/* Early termination for loops that handle many candidates at once: `candidates` were just handled
 * and every doc below next_doc was considered. */
static inline bool ranking_should_stop_after(ranking_run *run, uint32_t next_doc, uint32_t candidates) {
    if (ranking_bounds_settle(run, next_doc))
        return true;
    if (!run->stop_ns)
        return false;
    if (run->until_clock_check > candidates) {
        run->until_clock_check -= candidates;
        return false;
    }
    run->until_clock_check = RANKING_CLOCK_CHECK_EVERY;
    if (isn_now_ns() < run->stop_ns)
        return false;
    run->stopped = true;
    run->stopped_before_doc = next_doc;
    return true;
}

/* Query-tree evaluation (structured_search.c): the hits of isn_search for a query with a structure. */
int ranking_structured_search(isn_searcher *searcher, const isn_query *query, const isn_search_options *options,
                              uint64_t num_docs, bool exhaustive, ranking_run *run, char *err, size_t err_len);

/* Filters (filters.c): specs to compiled clauses (attribute names and keyword values to ids), and the
 * test of one document against all of them. */
int ranking_compile_filters(isn_searcher *searcher, const isn_filter_spec *filters, uint32_t num_filters,
                            ranking_filter *out, int64_t *values, uint32_t *num_values, char *err, size_t err_len);
bool ranking_filters_accept(const isn_index *index, const ranking_filter *filters, uint32_t num_filters,
                            const int64_t *values, uint32_t doc);

/* Whether query text uses any operator of the query syntax (query_syntax.c): text without is the bag
 * of words, whatever its length. */
bool ranking_query_has_syntax(const char *text, size_t len);

#endif
