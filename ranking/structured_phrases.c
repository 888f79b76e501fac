/* Phrase matches for query trees: the conjunction of a phrase's terms, confirmed by positions. */
#include "ranking/structured_internal.h"


/* Every start where each term of the phrase sits at its offset, in one field of the doc the cursors
 * sit on. */
static uint32_t phrase_freq_in_field(evaluation *e, const scorer *s, uint32_t field) {
    uint32_t counts[RANKING_MAX_PHRASE_TERMS];
    uint32_t *lists = e->positions;
    uint32_t n = s->num_terms;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t c = isn_positions_cursor_read(&s->positions[i], &s->cursors[i], field,
                                               lists + i * RANKING_PHRASE_POSITIONS, RANKING_PHRASE_POSITIONS);
        counts[i] = c < RANKING_PHRASE_POSITIONS ? c : RANKING_PHRASE_POSITIONS;
        if (counts[i] == 0) return 0;
    }
    uint32_t at[RANKING_MAX_PHRASE_TERMS];
    for (uint32_t i = 1; i < n; i++) at[i] = 0; /* not the whole array: most phrases have two or three terms */
    uint32_t freq = 0;
    for (uint32_t j = 0; j < counts[0]; j++) {
        uint32_t start = lists[j]; /* term 0 has offset 0 */
        bool all = true;
        for (uint32_t i = 1; i < n && all; i++) {
            uint32_t want = start + s->terms[i].offset;
            const uint32_t *list = lists + i * RANKING_PHRASE_POSITIONS;
            while (at[i] < counts[i] && list[at[i]] < want) at[i]++;
            all = at[i] < counts[i] && list[at[i]] == want;
        }
        freq += all;
    }
    return freq;
}

/* The phrase's matches on the doc all its cursors sit on. A field where one of its terms is absent shows
 * it in the position count read first (phrase_freq_in_field stops there); the per-field counts are not
 * looked up first: they lie far from the positions (a cache miss per term), and passing a posting's
 * positions unread only moves their skipping to the next read in the block. */
static uint32_t phrase_freq(evaluation *e, const scorer *s) {
    /* where the terms' positions mod 16, each rotated back by its offset, do not meet, no start can
     * match: most documents that hold every term are ruled out without reading their positions */
    uint32_t starts = 0xffffu;
    for (uint32_t i = 0; i < s->num_terms && starts; i++) {
        uint32_t mask = isn_positions_cursor_mask(&s->positions[i], &s->cursors[i]), shift = s->terms[i].offset & 15;
        starts &= (mask >> shift | mask << (16 - shift)) & 0xffffu;
    }
    if (!starts) return 0;
    uint32_t first = s->whole_document ? 0 : s->field, last = s->whole_document ? e->num_fields : s->field + 1;
    uint32_t freq = 0;
    for (uint32_t f = first; f < last; f++) freq += phrase_freq_in_field(e, s, f);
    return freq;
}


/* From the doc the phrase's lead landed on, the first one where every term is and the phrase matches. */
uint32_t ranking_phrase_settle(evaluation *e, scorer *s, uint32_t doc) {
    ranking_run *run = e->run;
    while (doc != ISN_DOC_END) {
        /* the lead's own frequency bounds the phrase's too: a doc it rules out is not aligned at all */
        if (doc <= s->prune_until && s->others_bound < INFINITY &&
            ranking_bound_fails((double)(s->weight * isn_bm25_tf_part(e->k1_plus_1, isn_cursor_freq(s->cursor),
                                                                        s->norms[doc])) +
                                    s->others_bound,
                                ranking_prior_of(run, doc), &run->topk)) {
            doc = ranking_next(run, s->cursor);
            continue;
        }
        uint32_t found = doc;
        for (uint32_t i = 0; i < s->num_terms && found == doc; i++) found = ranking_next_geq(run, &s->cursors[i], doc);
        if (found != doc) {
            doc = found == ISN_DOC_END ? ISN_DOC_END : ranking_next_geq(run, s->cursor, found);
            continue;
        }
        if (doc <= s->prune_until && s->others_bound < INFINITY) {
            uint32_t least = UINT32_MAX;
            for (uint32_t i = 0; i < s->num_terms; i++) {
                uint32_t tf = isn_cursor_freq(&s->cursors[i]);
                if (tf < least) least = tf;
            }
            double bound = (double)(s->weight * isn_bm25_tf_part(e->k1_plus_1, least, s->norms[doc]));
            if (ranking_bound_fails(bound + s->others_bound, ranking_prior_of(run, doc), &run->topk)) {
                doc = ranking_next(run, s->cursor);
                continue;
            }
        }
        uint32_t freq = phrase_freq(e, s);
        if (freq) {
            s->freq = freq;
            break;
        }
        doc = ranking_next(run, s->cursor);
    }
    return s->doc = doc;
}

bool ranking_phrase_matches(evaluation *e, scorer *s, uint32_t doc) {
    if (s->doc > doc) return false; /* settled past doc, or pending past it */
    if (s->doc == doc && !s->pending) return true;
    ranking_run *run = e->run;
    for (uint32_t i = 0; i < s->num_terms; i++) {
        uint32_t landed = ranking_next_geq(run, &s->cursors[i], doc);
        if (landed != doc) { /* no match before the doc this term holds next */
            s->doc = landed;
            s->pending = landed != ISN_DOC_END;
            return false;
        }
    }
    uint32_t freq = 0;
    if (doc > s->prune_until || s->others_bound == INFINITY) freq = phrase_freq(e, s);
    else {
        /* as settle: a doc the phrase cannot lift into the top k is passed unread (its score does not matter) */
        uint32_t least = UINT32_MAX;
        for (uint32_t i = 0; i < s->num_terms; i++) {
            uint32_t tf = isn_cursor_freq(&s->cursors[i]);
            if (tf < least) least = tf;
        }
        double bound = (double)(s->weight * isn_bm25_tf_part(e->k1_plus_1, least, s->norms[doc]));
        if (!ranking_bound_fails(bound + s->others_bound, ranking_prior_of(run, doc), &run->topk)) freq = phrase_freq(e, s);
    }
    if (freq) {
        s->freq = freq;
        s->doc = doc;
        s->pending = false;
        return true;
    }
    s->doc = doc + 1; /* doc < ISN_DOC_END */
    s->pending = true;
    return false;
}

/* The first doc >= target in a sorted list from *at on: galloping, then binary search (lists are walked
 * forward, mostly by small steps). */
