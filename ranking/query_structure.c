/* Clauses to a query tree compiled against the index: analysis, lexicon lookup, fields checked,
 * repeated clauses merged, and the flat block isn_search evaluates. */
#include <stdlib.h>
#include <string.h>

#include "ranking/ranking_internal.h"

/* Analysis of one clause's text: its terms (ids, or missing) at their positions. */
typedef struct {
    const isn_index *index;
    isn_analyzer *analyzer; /* the one emitting the terms: its stem cache remembers their ids */
    ranking_clause_term *terms;
    uint32_t num_terms, cap;
    uint32_t missing;
    bool overflow;
} clause_analysis;

static void collect_term(void *ctx, const char *term, size_t len, uint32_t position) {
    clause_analysis *a = ctx;
    if (a->num_terms == a->cap) {
        a->overflow = true;
        return;
    }
    uint32_t term_id = UINT32_MAX;
    if (!isn_index_find_emitted_term(a->index, a->analyzer, term, len, &term_id)) a->missing++;
    a->terms[a->num_terms++] = (ranking_clause_term){.term_id = term_id, .offset = position, .query_term = UINT32_MAX};
}

/* The compiled tree under construction, in heap scratch of the searcher (grown on demand). */
typedef struct {
    ranking_clause clauses[ISN_MAX_QUERY_CLAUSES];
    uint32_t num_clauses;
    ranking_clause_term terms[ISN_MAX_QUERY_TERMS];
    uint32_t num_terms;
} tree_draft;

/* Per searcher, allocated at its first query tree: what compiling one needs, so that no query allocates. */
typedef struct {
    tree_draft draft;
    ranking_clause_term analysis[ISN_MAX_QUERY_TERMS];
    isn_clause_spec specs[ISN_MAX_QUERY_CLAUSES];
} query_scratch;

static query_scratch *scratch_of(isn_searcher *searcher) {
    if (!searcher->query_scratch) searcher->query_scratch = malloc(sizeof(query_scratch));
    return searcher->query_scratch;
}

static bool same_clause(const tree_draft *d, const ranking_clause *a, const ranking_clause *b) {
    if (a->occur != b->occur || a->phrase != b->phrase || a->field != b->field || a->num_terms != b->num_terms)
        return false;
    for (uint32_t i = 0; i < a->num_terms; i++) {
        const ranking_clause_term *x = &d->terms[a->first_term + i], *y = &d->terms[b->first_term + i];
        if (x->term_id != y->term_id || x->offset != y->offset) return false;
    }
    return true;
}

/* Appends a clause over terms[0..n) (offsets already relative); a repeat of an earlier one raises its count. */
static int add_clause(tree_draft *d, isn_occur occur, int field, const ranking_clause_term *terms, uint32_t n,
                      uint32_t missing) {
    if (d->num_terms + n > ISN_MAX_QUERY_TERMS || d->num_clauses == ISN_MAX_QUERY_CLAUSES) return -1;
    ranking_clause candidate = {.occur = (uint8_t)occur, .phrase = n > 1, .field = (int16_t)field,
                                .first_term = d->num_terms, .num_terms = n, .count = 1, .missing = missing > 0};
    memcpy(&d->terms[d->num_terms], terms, n * sizeof *terms);
    for (uint32_t c = 0; c < d->num_clauses; c++)
        if (same_clause(d, &d->clauses[c], &candidate)) {
            d->clauses[c].count++;
            return 0;
        }
    d->num_terms += n;
    d->clauses[d->num_clauses++] = candidate;
    return 0;
}

/* The index's number of the spec's field, RANKING_WHOLE_DOCUMENT without one, -2 when it has none so named. */
static int field_number(const isn_index_info *info, const isn_clause_spec *spec) {
    if (spec->field == NULL || spec->field_len == 0) return RANKING_WHOLE_DOCUMENT;
    for (uint32_t f = 0; f < info->num_fields; f++)
        if (strlen(info->fields[f]) == spec->field_len && memcmp(info->fields[f], spec->field, spec->field_len) == 0)
            return (int)f;
    return -2;
}

static int find_field(const isn_index_info *info, const isn_clause_spec *spec, char *err, size_t err_len) {
    int field = field_number(info, spec);
    if (field != -2) return field;
    char names[ISN_MAX_FIELDS * (ISN_FIELD_NAME_MAX + 2)] = "";
    for (uint32_t f = 0; f < info->num_fields; f++) {
        if (f) strcat(names, ", ");
        strcat(names, info->fields[f]);
    }
    isn_error(err, err_len, "unknown field '%.*s' at byte %zu: this index has the fields %s",
              (int)(spec->field_len < ISN_FIELD_NAME_MAX ? spec->field_len : ISN_FIELD_NAME_MAX), spec->field,
              spec->offset, names);
    return -2;
}

/* Query text only: "micro:bit" or "file:lineno" where the index has no field micro or file is a word
 * with a colon in it (as the analyzer splits it), not a field clause that fails the query; a quoted
 * value after an unknown name ("file:\"x y\"") is field syntax and stays an error, as do structured
 * clauses naming an unknown field. */
static void unknown_fields_as_words(const isn_index_info *info, isn_clause_spec *specs, uint32_t n) {
    for (uint32_t s = 0; s < n; s++) {
        isn_clause_spec *spec = &specs[s];
        bool bare_value = spec->field_len && spec->text == spec->field + spec->field_len + 1;
        if (!bare_value || field_number(info, spec) != -2) continue;
        size_t end = (size_t)(spec->text + spec->text_len - spec->field);
        spec->text = spec->field;
        spec->text_len = end;
        spec->field = NULL;
        spec->field_len = 0;
        spec->phrase = spec->occur != ISN_OCCUR_SHOULD; /* as any word: "+micro:bit" requires "micro bit" */
    }
}

static int grow_structure(isn_searcher *searcher, size_t bytes) {
    if (bytes <= searcher->structure_capacity) return 0;
    void *grown = realloc(searcher->structure, bytes);
    if (!grown) return -1;
    searcher->structure = grown;
    searcher->structure_capacity = bytes;
    return 0;
}

/* The known terms of the scoring clauses, distinct, in first-occurrence order: what IDF, the cost
 * model and the second stage read. Links each clause term to its entry. */
static int list_query_terms(const isn_index *index, tree_draft *d, isn_query *query) {
    for (uint32_t c = 0; c < d->num_clauses; c++) {
        const ranking_clause *clause = &d->clauses[c];
        if (clause->occur == ISN_OCCUR_MUST_NOT) continue;
        for (uint32_t t = 0; t < clause->num_terms; t++) {
            ranking_clause_term *term = &d->terms[clause->first_term + t];
            if (term->term_id == UINT32_MAX) continue;
            uint32_t j = 0;
            while (j < query->num_terms && query->terms[j].term_id != term->term_id) j++;
            if (j == query->num_terms) {
                if (query->num_terms == ISN_MAX_QUERY_TERMS) return -1;
                isn_term_stats stats;
                isn_index_term_stats(index, term->term_id, &stats);
                query->terms[query->num_terms++] = (isn_query_term){.term_id = term->term_id, .count = 0, .df = stats.df};
            }
            query->terms[j].count += clause->count;
            term->query_term = j;
        }
    }
    return 0;
}

static bool plain_clause(const ranking_clause *clause) {
    return clause->occur == ISN_OCCUR_SHOULD && clause->field == RANKING_WHOLE_DOCUMENT && !clause->phrase;
}

int isn_query_from_clauses(isn_searcher *searcher, const isn_clause_spec *specs, uint32_t num_specs,
                           const isn_filter_spec *filters, uint32_t num_filters, isn_query *query, char *err,
                           size_t err_len) {
    if (searcher == NULL || query == NULL || (specs == NULL && num_specs) || (filters == NULL && num_filters)) {
        isn_error(err, err_len, "isn_query_from_clauses: searcher, query, specs and filters must not be NULL");
        return -1;
    }
    query->terms = searcher->parsed_terms;
    query->num_terms = 0;
    query->num_unknown = 0;
    query->structure = NULL;
    if (num_specs > ISN_MAX_QUERY_CLAUSES) {
        isn_error(err, err_len, "query has %u clauses, more than the limit of %d", num_specs, ISN_MAX_QUERY_CLAUSES);
        return -1;
    }
    if (num_filters > ISN_MAX_QUERY_FILTERS) {
        isn_error(err, err_len, "query has %u filters, more than the limit of %d", num_filters, ISN_MAX_QUERY_FILTERS);
        return -1;
    }
    const isn_index_info *info = isn_index_get_info(searcher->index);
    query_scratch *qs = scratch_of(searcher);
    if (!qs) {
        isn_error(err, err_len, "out of memory for a query tree");
        return -1;
    }
    tree_draft *d = &qs->draft;
    ranking_clause_term *scratch = qs->analysis;
    d->num_clauses = d->num_terms = 0;
    int rc = -1;
    for (uint32_t s = 0; s < num_specs; s++) {
        const isn_clause_spec *spec = &specs[s];
        if ((unsigned)spec->occur > ISN_OCCUR_MUST_NOT || (spec->text == NULL && spec->text_len)) {
            isn_error(err, err_len, "clause %u: unknown occur %d or no text", s, (int)spec->occur);
            goto done;
        }
        int field = find_field(info, spec, err, err_len);
        if (field == -2) goto done;
        clause_analysis a = {
            .index = searcher->index, .analyzer = searcher->analyzer, .terms = scratch, .cap = ISN_MAX_QUERY_TERMS};
        if (spec->text_len) isn_analyze(searcher->analyzer, spec->text, spec->text_len, collect_term, &a);
        if (a.overflow) goto too_many;
        if (a.num_terms == 0) continue; /* stopwords only: no clause, as Lucene's query builder */
        if (spec->phrase) {
            if (a.num_terms > RANKING_MAX_PHRASE_TERMS) {
                isn_error(err, err_len, "the phrase at byte %zu has %u terms, more than the %u a phrase may have",
                          spec->offset, a.num_terms, RANKING_MAX_PHRASE_TERMS);
                goto done;
            }
            uint32_t first = a.terms[0].offset;
            for (uint32_t t = 0; t < a.num_terms; t++) a.terms[t].offset -= first;
            if (add_clause(d, spec->occur, field, a.terms, a.num_terms, a.missing) != 0) goto too_many;
            continue;
        }
        for (uint32_t t = 0; t < a.num_terms; t++) {
            ranking_clause_term one = a.terms[t];
            one.offset = 0;
            bool missing = one.term_id == UINT32_MAX;
            if (missing && spec->occur == ISN_OCCUR_SHOULD) query->num_unknown++;
            if (add_clause(d, spec->occur, field, &one, 1, missing) != 0) goto too_many;
        }
    }
    if (list_query_terms(searcher->index, d, query) != 0) goto too_many;
    bool plain = num_filters == 0;
    for (uint32_t c = 0; c < d->num_clauses && plain; c++) plain = plain_clause(&d->clauses[c]);
    if (plain) {
        rc = 0;
        goto done;
    }
    uint32_t num_values = 0;
    for (uint32_t f = 0; f < num_filters; f++) num_values += filters[f].num_values;
    size_t bytes = ranking_structure_size(d->num_clauses, d->num_terms, num_filters, num_values);
    if (grow_structure(searcher, bytes) != 0) {
        isn_error(err, err_len, "out of memory for a query tree");
        goto done;
    }
    isn_query_structure *tree = searcher->structure;
    *tree = (isn_query_structure){.num_clauses = d->num_clauses, .num_terms = d->num_terms,
                                  .num_filters = num_filters, .num_values = num_values};
    memcpy(ranking_structure_clauses(tree), d->clauses, d->num_clauses * sizeof *d->clauses);
    memcpy(ranking_structure_terms(tree), d->terms, d->num_terms * sizeof *d->terms);
    uint32_t values_used = 0;
    if (num_filters && ranking_compile_filters(searcher, filters, num_filters, ranking_structure_filters(tree),
                                               ranking_structure_values(tree), &values_used, err, err_len) != 0)
        goto done;
    query->structure = tree;
    rc = 0;
    goto done;
too_many:
    isn_error(err, err_len, "query has more than %d clauses or %d terms (the limits per query)", ISN_MAX_QUERY_CLAUSES,
              ISN_MAX_QUERY_TERMS);
done:
    if (rc != 0) {
        query->num_terms = 0;
        query->num_unknown = 0;
        query->structure = NULL;
    }
    return rc;
}

int isn_query_parse_syntax(isn_searcher *searcher, const char *text, size_t len, const isn_filter_spec *filters,
                           uint32_t num_filters, isn_query *query, char *err, size_t err_len) {
    if (searcher == NULL || query == NULL) {
        isn_error(err, err_len, "isn_query_parse_syntax: searcher and query must not be NULL");
        return -1;
    }
    if (num_filters == 0 && (text == NULL || !ranking_query_has_syntax(text, len)))
        return isn_query_parse(searcher, text, len, query, err, err_len);
    query_scratch *qs = scratch_of(searcher);
    if (!qs) {
        isn_error(err, err_len, "out of memory for a query's clauses");
        return -1;
    }
    uint32_t n = 0;
    if (isn_query_syntax_split(text, len, qs->specs, ISN_MAX_QUERY_CLAUSES, &n, err, err_len) != 0) return -1;
    unknown_fields_as_words(isn_index_get_info(searcher->index), qs->specs, n);
    return isn_query_from_clauses(searcher, qs->specs, n, filters, num_filters, query, err, err_len);
}

size_t isn_query_structure_bytes(const isn_query_structure *s) {
    return s ? ranking_structure_size(s->num_clauses, s->num_terms, s->num_filters, s->num_values) : 0;
}

void isn_query_structure_view(const isn_query_structure *s, isn_tree_view *view) {
    *view = (isn_tree_view){.num_clauses = s->num_clauses,
                            .num_terms = s->num_terms,
                            .num_filters = s->num_filters,
                            .num_values = s->num_values,
                            .clauses = ranking_structure_clauses(s),
                            .terms = ranking_structure_terms(s),
                            .filters = ranking_structure_filters(s),
                            .values = ranking_structure_values(s)};
}

void isn_query_structure_copy(void *dst, const isn_query_structure *s) {
    memcpy(dst, s, isn_query_structure_bytes(s));
}

bool isn_query_structure_has_phrase(const isn_query_structure *s) {
    if (!s) return false;
    const ranking_clause *clauses = ranking_structure_clauses(s);
    for (uint32_t c = 0; c < s->num_clauses; c++)
        if (clauses[c].phrase) return true;
    return false;
}

bool isn_query_structure_has_filter(const isn_query_structure *s) { return s && s->num_filters > 0; }

static size_t append(char *buf, size_t len, size_t at, const char *text) {
    size_t n = strlen(text);
    if (at < len) {
        size_t room = len - at - 1;
        memcpy(buf + at, text, n < room ? n : room);
        buf[at + (n < room ? n : room)] = '\0';
    }
    return at + n;
}

size_t isn_query_structure_describe(const isn_searcher *searcher, const isn_query *query, char *buf, size_t len) {
    if (len) buf[0] = '\0';
    const isn_query_structure *s = query->structure;
    size_t at = 0;
    if (!s) {
        for (uint32_t t = 0; t < query->num_terms; t++) {
            char term[256];
            isn_index_term_text(searcher->index, query->terms[t].term_id, term, sizeof term);
            at = append(buf, len, at, t ? " " : "");
            at = append(buf, len, at, term);
        }
        return at;
    }
    const isn_index_info *info = isn_index_get_info(searcher->index);
    const ranking_clause *clauses = ranking_structure_clauses(s);
    const ranking_clause_term *terms = ranking_structure_terms(s);
    for (uint32_t c = 0; c < s->num_clauses; c++) {
        const ranking_clause *clause = &clauses[c];
        at = append(buf, len, at, c ? " " : "");
        at = append(buf, len, at, clause->occur == ISN_OCCUR_MUST ? "+" : clause->occur == ISN_OCCUR_MUST_NOT ? "-" : "");
        if (clause->field != RANKING_WHOLE_DOCUMENT) {
            at = append(buf, len, at, info->fields[clause->field]);
            at = append(buf, len, at, ":");
        }
        if (clause->phrase) at = append(buf, len, at, "\"");
        for (uint32_t t = 0; t < clause->num_terms; t++) {
            char term[256] = "?";
            if (terms[clause->first_term + t].term_id != UINT32_MAX)
                isn_index_term_text(searcher->index, terms[clause->first_term + t].term_id, term, sizeof term);
            at = append(buf, len, at, t ? " " : "");
            at = append(buf, len, at, term);
        }
        if (clause->phrase) at = append(buf, len, at, "\"");
    }
    if (s->num_filters) {
        char note[64];
        snprintf(note, sizeof note, " [%u filters]", s->num_filters);
        at = append(buf, len, at, note);
    }
    return at;
}
