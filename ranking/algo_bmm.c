/* Block-max MaxScore over doc-id windows, as Lucene 10's MaxScoreBulkScorer.
 *
 * The doc-id space is cut into outer windows of at least RANKING_OUTER_WINDOW_MIN_DOCS docs (longer when every
 * essential list's current block reaches further). For each outer window every term gets a bound from
 * the block maxima of the blocks overlapping it, far tighter than the list's global maximum; lists whose
 * bounds together cannot beat the threshold are non-essential (MaxScore's lowest bounds, or the set
 * that leaves the essential lists fewer postings: see choose_nonessential). The essential lists are
 * then scored term at a time, a whole decoded block at once, into a dense accumulator of
 * RANKING_WINDOW_DOCS docs (an inner window); only the docs they hold are candidates. The non-essential
 * lists that are sparse there next to the essential ones are added to the candidates in bulk, a block
 * at a time like the essential lists; the candidates that can still win are completed from the other
 * non-essential lists together, one list at a time (highest bound first), each candidate dropped once
 * its partial score plus the remaining bounds cannot win. A window where no term can compete is
 * skipped without decoding anything. Under a query tree's leading filter of few documents the inner
 * window is seeded with the filter's documents first, and only the essential lists' postings on them
 * become candidates.
 *
 * Scores are the same as everywhere else: each term's contribution is the float weight * tf_part and
 * the contributions are summed in double, which is exact for BM25's magnitudes, so the order in which
 * they arrive changes nothing and the hits are bit-identical to the exhaustive OR. */
#include <math.h>

#include "ranking/ranking_internal.h"

/* Outer windows span at least this many docs: fewer partitions to compute pays more than the
 * tighter bounds of shorter windows (bench on the Debian logs: 512, 1024 and 2048 were slower). */
#define RANKING_OUTER_WINDOW_MIN_DOCS 16384u

/* Inner window size while the top-k is not full yet (without a seed every candidate is completed; with one the
 * bound's early end is checked at each window's start). */
#define RANKING_FIRST_WINDOW_DOCS 1024u

/* choose_nonessential takes quadratic time in the query's terms: longer queries keep MaxScore's choice. */
#define RANKING_CHOICE_MAX_TERMS 64u

/* A non-essential list is added to the candidates in bulk while it holds at most this many postings in
 * the window per posting of the essential lists: a posting read in bulk costs about as much as a
 * candidate looked up. */
#define RANKING_BULK_RATIO 1.0f

/* Largest block maximum among the blocks of the list that may hold docs in [lo, hi] (inclusive); sets
 * *postings to about how many postings the list holds there, as if each block's postings were spread
 * evenly over the doc ids between its predecessor's last doc and its own. */
static inline float window_max_tf_part(const isn_cursor *c, uint32_t *from_block, uint32_t lo, uint32_t hi,
                                       float *postings) {
    const isn_block_meta *m = c->blocks;
    uint32_t nb = c->num_blocks, b = *from_block;
    if (b < c->block)
        b = c->block;
    while (b < nb && m[b].last_doc < lo)
        b++;
    *from_block = b;
    float best = 0.0f, count = 0.0f;
    for (; b < nb; b++) {
        if (m[b].max_tf_part > best)
            best = m[b].max_tf_part;
        uint32_t first = b ? m[b - 1].last_doc + 1 : 0, last = m[b].last_doc;
        uint32_t in_block = b + 1 == nb ? c->df - b * ISN_BLOCK_SIZE : ISN_BLOCK_SIZE;
        uint32_t from = first > lo ? first : lo, to = last < hi ? last : hi;
        count += (float)in_block * (float)(to - from + 1) / (float)(last - first + 1);
        if (last >= hi)
            break;
    }
    *postings = count;
    return best;
}

/* The last doc of the block the cursor's next posting at or after `doc` lies in (ISN_DOC_END past the
 * end): a window ending there keeps the list's bound to one block. */
static inline uint32_t block_end_at(const isn_cursor *c, uint32_t doc) {
    const isn_block_meta *m = c->blocks;
    uint32_t b = c->block;
    while (b < c->num_blocks && m[b].last_doc < doc)
        b++;
    return b < c->num_blocks ? m[b].last_doc : ISN_DOC_END;
}

/* Where the next outer window starts: the first doc at or after `from` that some list may hold
 * (ISN_DOC_END once every list is exhausted there). A lagging cursor counts as `from` while its list
 * goes on past it. */
static inline uint32_t next_window_min(const ranking_window_term *t, uint32_t n, uint32_t from) {
    if (from == ISN_DOC_END)
        return ISN_DOC_END;
    uint32_t next = ISN_DOC_END;
    for (uint32_t i = 0; i < n; i++) {
        const isn_cursor *c = t[i].term.cursor;
        uint32_t at = c->doc >= from                                                   ? c->doc
                      : c->num_blocks && c->blocks[c->num_blocks - 1].last_doc >= from ? from
                                                                                       : ISN_DOC_END;
        if (at < next)
            next = at;
    }
    return next;
}

/* Sorts by bound ascending; the order barely changes from window to window, so insertion sort is
 * close to linear here. */
static void sort_by_bound(ranking_window_term *t, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) {
        ranking_window_term moving = t[i];
        uint32_t j = i;
        while (j > 0 && t[j - 1].bound > moving.bound) {
            t[j] = t[j - 1];
            j--;
        }
        t[j] = moving;
    }
}

/* Adds the list's postings in [lo, hi) to the accumulator (doc lo at index 0) and leaves the cursor on
 * its first posting at or after hi. An essential list's docs become candidates (their bits are set);
 * with candidates_only, a list only adds to the docs that already are: every posting is scored and
 * added times 0 or 1 (exact, the score being finite), since whether a candidate holds it is as random
 * as the documents. Seeded, an essential list's docs become candidates only where a seed bit is set
 * (ranking_run.seed). */
__attribute__((always_inline)) static inline void add_postings_to(ranking_run *run, const ranking_term *term,
                                                                  uint32_t lo, uint32_t hi, bool candidates_only,
                                                                  bool seeded) {
    isn_cursor *c = term->cursor;
    if (candidates_only && c->doc < lo)
        ranking_next_geq(run, c, lo);
    double *scores = run->window->scores;
    uint64_t *bits = run->window->bits;
    const uint64_t *seeds = run->window->seeds;
    const float *norms = run->cursor_norms ? c->norms : run->norms;
    const float k1_plus_1 = run->k1_plus_1, weight = term->weight;
    while (c->doc < hi) {
        const uint32_t *docs = c->docs;
        const uint32_t *freqs = isn_cursor_block_freqs(c);
        uint32_t pos = c->pos, stop = c->count;
        if (c->blocks[c->block].last_doc >= hi) {
            stop = pos;
            while (docs[stop] < hi)
                stop++;
        }
        if (seeded) { /* the postings on seeds first, without a branch (few are); only they are scored */
            uint8_t *on_seed = run->window->on_seed;
            uint32_t found = 0;
            for (uint32_t p = pos; p < stop; p++) {
                uint32_t at = docs[p] - lo;
                on_seed[found] = (uint8_t)p;
                found += (uint32_t)(seeds[at >> 6] >> (at & 63) & 1);
            }
            for (uint32_t i = 0; i < found; i++) {
                uint32_t p = on_seed[i], doc = docs[p], at = doc - lo;
                scores[at] += (double)(weight * isn_bm25_tf_part(k1_plus_1, freqs[p] + 1, norms[doc]));
                bits[at >> 6] |= UINT64_C(1) << (at & 63);
            }
        } else {
            for (uint32_t p = pos; p < stop; p++) {
                uint32_t doc = docs[p], at = doc - lo;
                double score = (double)(weight * isn_bm25_tf_part(k1_plus_1, freqs[p] + 1, norms[doc]));
                if (candidates_only) {
                    scores[at] += (double)(bits[at >> 6] >> (at & 63) & 1) * score;
                } else {
                    scores[at] += score;
                    bits[at >> 6] |= UINT64_C(1) << (at & 63);
                }
            }
        }
        run->postings_scored += stop - pos;
        if (stop < c->count) {
            c->pos = stop;
            c->doc = docs[stop];
            return;
        }
        isn_cursor_next_block(c);
        run->blocks_decoded++;
    }
}

__attribute__((always_inline)) static inline void add_postings(ranking_run *run, const ranking_term *term,
                                                               uint32_t lo, uint32_t hi, bool candidates_only) {
    add_postings_to(run, term, lo, hi, candidates_only, false);
}

/* The inner window [lo, hi) under a seeding filter: its documents are the only possible candidates,
 * the essential lists t[first_essential..n) add to them, the bulk ones t[completed..first_essential) to
 * those candidates. Apart from the bag of words' loop, which stays as it was. */
__attribute__((noinline)) static void add_seeded_window(ranking_run *run, ranking_window_term *t, uint32_t completed,
                                                        uint32_t first_essential, uint32_t n, uint32_t lo,
                                                        uint32_t hi) {
    uint64_t *seeds = run->window->seeds;
    run->seed(run->admit_ctx, lo, hi, seeds);
    for (uint32_t i = first_essential; i < n; i++)
        add_postings_to(run, &t[i].term, lo, hi, false, true);
    for (uint32_t i = completed; i < first_essential; i++)
        add_postings(run, &t[i].term, lo, hi, true);
    for (uint32_t w = 0; w < (hi - lo + 63) / 64; w++)
        seeds[w] = 0;
}

/* MaxScore's non-essential lists are those of lowest bound while their bounds sum to no more than the
 * threshold (t[0..first_essential), t sorted by bound ascending). Any set of lists whose bounds sum to no
 * more than it is as exact a choice, and the cheapest leaves the fewest postings to the essential lists,
 * whose docs are the candidates: a list with a high bound but many postings (a frequent term repeated in
 * the query) may be left out of them at the price of several rarer ones. The lists are taken by
 * postings per unit of bound, densest first, while their bounds fit; when that leaves the essential
 * lists fewer postings, t is reordered so that they are t[0..returned) (each part still by bound
 * ascending) and prefix_bound follows the new order. Returns the first essential list. */
static uint32_t choose_nonessential(ranking_window_term *t, uint32_t n, uint32_t first_essential,
                                    const isn_topk *topk, double prior, double *prefix_bound) {
    if (n > RANKING_CHOICE_MAX_TERMS)
        return first_essential;
    float standard = 0.0f, chosen = 0.0f;
    for (uint32_t i = 0; i < first_essential; i++)
        standard += t[i].postings;
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        t[i].nonessential = false;
    uint32_t count = 0;
    for (;;) {
        uint32_t best = n;
        for (uint32_t i = 0; i < n; i++) {
            if (t[i].nonessential || !ranking_bound_fails(sum + t[i].bound, prior, topk))
                continue;
            if (best == n || t[i].postings * t[best].bound > t[best].postings * t[i].bound)
                best = i;
        }
        if (best == n)
            break;
        t[best].nonessential = true;
        sum += t[best].bound;
        chosen += t[best].postings;
        count++;
    }
    if (!(chosen > standard))
        return first_essential;
    /* Stable partition: the chosen lists first. */
    for (uint32_t i = 0, placed = 0; i < n; i++) {
        if (!t[i].nonessential)
            continue;
        ranking_window_term moving = t[i];
        for (uint32_t j = i; j > placed; j--)
            t[j] = t[j - 1];
        t[placed++] = moving;
    }
    sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        sum += t[i].bound;
        prefix_bound[i] = sum;
    }
    return count;
}

/* Splits the non-essential lists t[0..first_essential) of an outer window: those that hold few postings
 * there next to the essential lists (which make the candidates) are cheaper to add to the candidates in
 * bulk than to look up for each candidate; they go to t[m..first_essential). The others stay in
 * t[0..m), by bound ascending, and are completed per candidate; completion_bound[i] is the sum of the
 * bounds of t[0..i]. Returns m. */
static uint32_t split_nonessential(ranking_window_term *t, uint32_t first_essential, uint32_t n,
                                   double *completion_bound, float bulk_ratio) {
    float essential_postings = 0.0f;
    for (uint32_t i = first_essential; i < n; i++)
        essential_postings += t[i].postings;
    uint32_t m = 0;
    for (uint32_t i = 0; i < first_essential; i++) {
        if (t[i].postings <= bulk_ratio * essential_postings)
            continue;
        ranking_window_term completed = t[i]; /* moves down to m, keeping the order */
        for (uint32_t j = i; j > m; j--)
            t[j] = t[j - 1];
        t[m++] = completed;
    }
    double sum = 0.0;
    for (uint32_t i = 0; i < m; i++) {
        sum += t[i].bound;
        completion_bound[i] = sum;
    }
    return m;
}

/* Whether a candidate whose BM25 is at most bound can still beat the threshold, its own prior added when
 * the run has one (with_prior: a constant where this is inlined, so that the loops without a prior stay
 * as they were). */
__attribute__((always_inline)) static inline bool candidate_can_win(const ranking_run *run, double bound, uint32_t doc,
                                                                    double threshold, bool with_prior) {
    if (with_prior)
        return bound * RANKING_BOUND_SLACK + ranking_prior_of(run, doc) > threshold;
    return bound * RANKING_BOUND_SLACK > threshold;
}

/* Completes the candidates cand_docs / cand_scores[0..kept) (in doc order, each able to win with every
 * bound of t[0..upto) added) from t[0..upto), one list at a time, highest bound first: each list's
 * cursor walks forward through the candidates once, and a candidate is dropped as soon as its score
 * plus the bounds still to add (prefix_bound[i]: the sum of the bounds of t[0..i]) cannot beat the
 * threshold. The threshold is the one the batch started with (nothing is offered before the end), a
 * valid lower bound of the final one. The survivors are offered in doc order. */
__attribute__((always_inline)) static inline void complete_candidates(ranking_run *run, ranking_window_term *t,
                                                                      uint32_t upto, const double *prefix_bound,
                                                                      uint32_t kept, bool with_prior) {
    uint32_t *cand_docs = run->window->cand_docs;
    double *cand_scores = run->window->cand_scores;
    const double threshold = run->topk.threshold;
    for (uint32_t i = upto; i-- > 0 && kept;) {
        const double others = i ? prefix_bound[i - 1] : 0.0;
        const ranking_term *term = &t[i].term;
        isn_cursor *cursor = term->cursor;
        const float *norms = run->cursor_norms ? cursor->norms : run->norms;
        uint32_t out = 0;
        for (uint32_t c = 0; c < kept; c++) {
            uint32_t doc = cand_docs[c];
            double score = cand_scores[c];
            if (cursor->doc < doc)
                ranking_next_geq(run, cursor, doc);
            if (cursor->doc == doc) {
                run->postings_scored++;
                score += (double)(term->weight * isn_bm25_tf_part(run->k1_plus_1, isn_cursor_freq(cursor), norms[doc]));
            }
            cand_docs[out] = doc;
            cand_scores[out] = score;
            out += candidate_can_win(run, score + others, doc, threshold, with_prior);
        }
        kept = out;
    }
    run->docs_evaluated += kept;
    for (uint32_t c = 0; c < kept; c++)
        ranking_collect(run, cand_docs[c], ranking_final_score(run, cand_docs[c], cand_scores[c]));
}

/* The window when the top term is required (a document without it cannot reach the threshold,
 * whatever the others add) or alone: its postings in [lo, hi) are the candidates, one at a time,
 * completed from all the other terms. Returns how many candidates there were. */
__attribute__((always_inline)) static inline uint32_t score_led_window_with(ranking_run *run, ranking_window_term *t,
                                                                          uint32_t n, const double *prefix_bound,
                                                                          uint32_t lo, uint32_t hi, bool with_admit,
                                                                          bool with_prior) {
    ranking_window_term *lead = &t[n - 1];
    isn_cursor *c = lead->term.cursor;
    if (c->doc < lo)
        ranking_next_geq(run, c, lo);
    const float *norms = run->cursor_norms ? c->norms : run->norms;
    const float k1_plus_1 = run->k1_plus_1, weight = lead->term.weight;
    uint32_t *cand_docs = run->window->cand_docs;
    double *cand_scores = run->window->cand_scores;
    /* The lead's own bound is not in prefix_bound[n - 2]: its score stands in for it. */
    const double rest = n > 1 ? prefix_bound[n - 2] : 0.0;
    uint32_t candidates = 0, admitted = 0;
    bool (*const admit)(void *, uint32_t) = run->admit;
    while (c->doc < hi) {
        const double threshold = run->topk.threshold;
        const uint32_t *freqs = isn_cursor_block_freqs(c);
        uint32_t p = c->pos, count = c->count;
        /* A block's postings at a time, as one batch: the threshold rises between blocks. */
        uint32_t kept = 0;
        for (; p < count; p++) {
            uint32_t doc = c->docs[p];
            if (doc >= hi)
                break;
            float part = isn_bm25_tf_part(k1_plus_1, freqs[p] + 1, norms[doc]);
            double score = (double)(weight * part);
            cand_docs[kept] = doc;
            cand_scores[kept] = score;
            bool keep = candidate_can_win(run, score + rest, doc, threshold, with_prior);
            if (with_admit && keep) { /* only candidates that can win are tested, and only those counted */
                keep = admit(run->admit_ctx, doc);
                admitted += keep;
            }
            kept += keep;
        }
        complete_candidates(run, t, n - 1, prefix_bound, kept, with_prior);
        run->postings_scored += p - c->pos;
        candidates += p - c->pos;
        if (p < count) {
            c->pos = p;
            c->doc = c->docs[p];
            break;
        }
        isn_cursor_next_block(c);
        run->blocks_decoded++;
    }
    run->matched += with_admit ? admitted : candidates;
    return candidates;
}

/* The bag of words' windows apart from those under a query tree's admit hook or with a prior, so that its
 * loops stay as they were. */
static uint32_t score_led_window(ranking_run *run, ranking_window_term *t, uint32_t n, const double *prefix_bound,
                                 uint32_t lo, uint32_t hi) {
    if (run->prior)
        return run->admit ? score_led_window_with(run, t, n, prefix_bound, lo, hi, true, true)
                          : score_led_window_with(run, t, n, prefix_bound, lo, hi, false, true);
    return run->admit ? score_led_window_with(run, t, n, prefix_bound, lo, hi, true, false)
                      : score_led_window_with(run, t, n, prefix_bound, lo, hi, false, false);
}

/* Completes and offers the inner window's candidates; returns how many there were. Most candidates
 * of a long query cannot win even with every non-essential bound added: a first branch-free pass
 * keeps only those that can, for complete_candidates. */
__attribute__((always_inline)) static inline uint32_t collect_window_with(ranking_run *run, ranking_window_term *t,
                                                                        uint32_t first_essential,
                                                                        const double *nonessential_bound, uint32_t lo,
                                                                        uint32_t hi, bool with_admit,
                                                                        bool (*const admit)(void *, uint32_t),
                                                                        bool with_prior) {
    ranking_window *window = run->window;
    double *scores = window->scores;
    uint64_t *bits = window->bits;
    uint32_t *cand_docs = window->cand_docs;
    double *cand_scores = window->cand_scores;
    const double threshold = run->topk.threshold;
    const double rest = first_essential ? nonessential_bound[first_essential - 1] : 0.0;
    uint32_t candidates = 0, kept = 0, admitted = 0;
    const uint32_t words = (hi - lo + 63) / 64;
    for (uint32_t w = 0; w < words; w++) {
        uint64_t word = bits[w];
        if (!word)
            continue;
        bits[w] = 0;
        candidates += (uint32_t)__builtin_popcountll(word);
        double *word_scores = scores + w * 64;
        for (; word; word &= word - 1) {
            uint32_t i = (uint32_t)__builtin_ctzll(word);
            double score = word_scores[i];
            word_scores[i] = 0.0;
            cand_docs[kept] = lo + w * 64 + i;
            cand_scores[kept] = score;
            bool keep = candidate_can_win(run, score + rest, lo + w * 64 + i, threshold, with_prior);
            if (with_admit && keep) {
                keep = admit(run->admit_ctx, lo + w * 64 + i);
                admitted += keep;
            }
            kept += keep;
        }
    }
    run->matched += with_admit ? admitted : candidates;
    complete_candidates(run, t, first_essential, nonessential_bound, kept, with_prior);
    return candidates;
}

static inline uint32_t collect_window(ranking_run *run, ranking_window_term *t, uint32_t first_essential,
                                      const double *nonessential_bound, uint32_t lo, uint32_t hi) {
    /* seeded, the candidates are the seeds': seeded_admit tests them */
    bool (*const admit)(void *, uint32_t) = run->seed ? run->seeded_admit : run->admit;
    if (run->prior)
        return run->admit ? collect_window_with(run, t, first_essential, nonessential_bound, lo, hi, true, admit, true)
                          : collect_window_with(run, t, first_essential, nonessential_bound, lo, hi, false, NULL, true);
    return run->admit ? collect_window_with(run, t, first_essential, nonessential_bound, lo, hi, true, admit, false)
                      : collect_window_with(run, t, first_essential, nonessential_bound, lo, hi, false, NULL, false);
}

void ranking_block_max_maxscore(ranking_run *run) {
    uint32_t n = run->num_terms;
    ranking_window_term *t = run->window_terms;
    double *nonessential_bound = run->scratch_bounds, *completion_bound = run->completion_bounds;
    for (uint32_t i = 0; i < n; i++)
        t[i] = (ranking_window_term){.term = run->terms[i], .bound = run->terms[i].max_score, .bound_block = 0};
    isn_topk *topk = &run->topk;
    uint32_t first_essential = 0, pending = 0;
    uint32_t window_min = ranking_min_doc(run->terms, 0, n);
    while (window_min != ISN_DOC_END) {
        if (run->skip_to && (window_min = run->skip_to(run->admit_ctx, window_min)) == ISN_DOC_END)
            break;
        /* Outer window: to the nearest block end of an essential list, but RANKING_OUTER_WINDOW_MIN_DOCS
         * docs at least. */
        uint32_t end_incl = ISN_DOC_END - 1;
        /* after a window that nothing in could compete (no essential list), every list's: a window to the end
         * of the index would take the bounds of all that is left, far looser than a block's */
        for (uint32_t i = first_essential < n ? first_essential : 0; i < n; i++) {
            uint32_t e = block_end_at(t[i].term.cursor, window_min);
            if (e < end_incl)
                end_incl = e;
        }
        uint32_t min_end = window_min <= ISN_DOC_END - RANKING_OUTER_WINDOW_MIN_DOCS
                               ? window_min + RANKING_OUTER_WINDOW_MIN_DOCS - 1
                               : ISN_DOC_END - 1;
        if (end_incl < min_end)
            end_incl = min_end;
        uint32_t window_end = end_incl + 1; /* exclusive; ISN_DOC_END at most */

        for (uint32_t i = 0; i < n; i++)
            t[i].bound = (double)(t[i].term.weight * window_max_tf_part(t[i].term.cursor, &t[i].bound_block,
                                                                        window_min, end_incl, &t[i].postings));
        sort_by_bound(t, n);
        double sum = 0.0;
        for (uint32_t i = 0; i < n; i++) {
            sum += t[i].bound;
            nonessential_bound[i] = sum;
        }
        /* the window's documents have priors below the prior's bound at its start */
        const double prior = ranking_prior_from(run, window_min);
        first_essential = 0;
        while (first_essential < n && ranking_bound_fails(nonessential_bound[first_essential], prior, topk))
            first_essential++;
        if (first_essential == n) { /* nothing in this window can compete */
            /* with a prior, whose bound only falls, often nothing after it either: end rather than pass
             * every later window (without one the windows stay as they were) */
            if (run->prior && ranking_bounds_settle(run, window_min))
                return;
            window_min = next_window_min(t, n, window_end);
            continue;
        }
        first_essential = choose_nonessential(t, n, first_essential, topk, prior, nonessential_bound);
        if (n == 1 || first_essential == n - 1 ||
            ranking_bound_fails(nonessential_bound[n - 1] - t[n - 1].bound, prior, topk)) {
            /* Deadline checks come before a window, counting the candidates handled since the last one:
             * every doc below the window was considered, and a search that finishes is complete. */
            if (ranking_should_stop_after(run, window_min, pending))
                return;
            pending = score_led_window(run, t, n, nonessential_bound, window_min, window_end);
            first_essential = n - 1;
            window_min = next_window_min(t, n, window_end);
            continue;
        }
        for (uint32_t i = first_essential; i < n; i++)
            if (t[i].term.cursor->doc < window_min)
                ranking_next_geq(run, t[i].term.cursor, window_min);
        /* seeded, the candidates are few: the non-essential lists complete them, none is added in bulk */
        const uint32_t completed =
            split_nonessential(t, first_essential, n, completion_bound, run->seed ? 0.0f : RANKING_BULK_RATIO);

        /* Inner windows, each starting at the first doc an essential list holds. */
        bool repartition = false;
        for (;;) {
            uint32_t inner_min = ISN_DOC_END;
            for (uint32_t i = first_essential; i < n; i++)
                if (t[i].term.cursor->doc < inner_min)
                    inner_min = t[i].term.cursor->doc;
            if (inner_min >= window_end)
                break;
            if (run->skip_to) {
                uint32_t next = run->skip_to(run->admit_ctx, inner_min);
                if (next > inner_min) { /* no candidate can be admitted before it */
                    if (next >= window_end)
                        break;
                    for (uint32_t i = first_essential; i < n; i++)
                        if (t[i].term.cursor->doc < next)
                            ranking_next_geq(run, t[i].term.cursor, next);
                    continue;
                }
            }
            /* Until k documents are known small windows: without a seed every candidate is completed then,
             * so that a threshold is learnt before the first full window; with one, the run may end by the
             * bound (ranking_bounds_settle) at any window's start, and a completion seeded with the k-th score
             * of the documents before first_doc often ends at its first. */
            uint32_t inner_docs = ranking_topk_known(run) ? RANKING_WINDOW_DOCS : RANKING_FIRST_WINDOW_DOCS;
            uint32_t inner_end = inner_min <= window_end - inner_docs ? inner_min + inner_docs : window_end;
            if (ranking_should_stop_after(run, inner_min, pending))
                return;
            if (run->seed) {
                add_seeded_window(run, t, completed, first_essential, n, inner_min, inner_end);
            } else {
                for (uint32_t i = first_essential; i < n; i++)
                    add_postings(run, &t[i].term, inner_min, inner_end, false);
                for (uint32_t i = completed; i < first_essential; i++)
                    add_postings(run, &t[i].term, inner_min, inner_end, true);
            }
            pending = collect_window(run, t, completed, completion_bound, inner_min, inner_end);
            /* The threshold rose past what made another list non-essential: new partition from here. */
            if (ranking_bound_fails(nonessential_bound[first_essential], ranking_prior_from(run, inner_end), topk) &&
                inner_end < window_end) {
                window_min = inner_end;
                repartition = true;
                break;
            }
        }
        if (!repartition)
            window_min = next_window_min(t, n, window_end);
    }
}
