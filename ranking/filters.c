/* Filter clauses over the index's document attributes: compiled once per query (names and keyword
 * values to ids), then tested per candidate before it is scored. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/ranking_internal.h"

static const char *const op_names[] = {"=", ">=", ">", "<=", "<"};

static void list_attributes(const isn_index *index, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t a = 0; a < isn_index_num_attributes(index) && at < len; a++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", a ? ", " : "", isn_index_attribute_name(index, a));
}

int ranking_compile_filters(isn_searcher *searcher, const isn_filter_spec *filters, uint32_t num_filters,
                            ranking_filter *out, int64_t *values, uint32_t *num_values, char *err, size_t err_len) {
    const isn_index *index = searcher->index;
    *num_values = 0;
    for (uint32_t f = 0; f < num_filters; f++) {
        const isn_filter_spec *spec = &filters[f];
        const char *name = spec->attribute ? spec->attribute : "";
        isn_attribute_kind kind;
        int attribute = isn_index_attribute_find(index, name, &kind);
        if (attribute < 0) {
            char names[ISN_MAX_ATTRIBUTES * (ISN_FIELD_NAME_MAX + 2)];
            list_attributes(index, names, sizeof names);
            if (names[0])
                isn_error(err, err_len, "filter %u: unknown attribute '%.64s': this index has the attributes %s", f,
                          name, names);
            else
                isn_error(err, err_len,
                          "filter %u: unknown attribute '%.64s': this index has no attributes (isn-index build "
                          "--attribute NAME:keyword|int)",
                          f, name);
            return -1;
        }
        if ((unsigned)spec->op > ISN_FILTER_LT) {
            isn_error(err, err_len, "filter %u on %s: unknown operator %d", f, name, (int)spec->op);
            return -1;
        }
        if (spec->num_values == 0 || spec->num_values > ISN_MAX_FILTER_VALUES ||
            (spec->op != ISN_FILTER_EQ && spec->num_values != 1) || spec->values == NULL) {
            isn_error(err, err_len, "filter %u on %s: '%s' takes %s (got %u values)", f, name, op_names[spec->op],
                      spec->op == ISN_FILTER_EQ ? "1 to 1024 values" : "one value", spec->num_values);
            return -1;
        }
        if (kind == ISN_ATTRIBUTE_KEYWORD && spec->op != ISN_FILTER_EQ) {
            isn_error(err, err_len, "filter %u: %s is a keyword attribute: it takes = and in, not %s", f, name,
                      op_names[spec->op]);
            return -1;
        }
        ranking_filter *compiled = &out[f];
        *compiled = (ranking_filter){.attribute = (uint32_t)attribute, .op = (uint8_t)spec->op,
                                     .negate = spec->negate, .first_value = *num_values};
        for (uint32_t v = 0; v < spec->num_values; v++) {
            const char *text = spec->values[v] ? spec->values[v] : "";
            int64_t value;
            if (kind == ISN_ATTRIBUTE_KEYWORD) {
                /* a keyword no document has matches nothing: it needs no slot */
                if (!isn_index_keyword_id(index, (uint32_t)attribute, text, strlen(text), &value)) continue;
            } else {
                char *end;
                errno = 0;
                long long parsed = strtoll(text, &end, 10);
                if (errno || end == text || *end) {
                    isn_error(err, err_len, "filter %u: %s is an int attribute and '%.64s' is not an integer", f, name,
                              text);
                    return -1;
                }
                value = parsed;
            }
            values[(*num_values)++] = value;
            compiled->num_values++;
        }
    }
    return 0;
}

bool ranking_filters_accept(const isn_index *index, const ranking_filter *filters, uint32_t num_filters,
                            const int64_t *values, uint32_t doc) {
    for (uint32_t f = 0; f < num_filters; f++) {
        const ranking_filter *filter = &filters[f];
        int64_t v = isn_index_attribute_value(index, filter->attribute, doc);
        const int64_t *want = values + filter->first_value;
        bool holds = false;
        if (v != ISN_ATTRIBUTE_MISSING) {
            switch (filter->op) {
            case ISN_FILTER_EQ:
                for (uint32_t i = 0; i < filter->num_values && !holds; i++) holds = v == want[i];
                break;
            case ISN_FILTER_GE: holds = v >= want[0]; break;
            case ISN_FILTER_GT: holds = v > want[0]; break;
            case ISN_FILTER_LE: holds = v <= want[0]; break;
            default: holds = v < want[0]; break;
            }
        }
        if (holds == (bool)filter->negate) return false;
    }
    return true;
}

int isn_filter_parse(char *text, isn_filter_spec *spec, const char **values, uint32_t max_values) {
    memset(spec, 0, sizeof *spec);
    spec->values = values;
    char *in = strstr(text, " not in ");
    size_t skip = 8;
    if (!in) {
        in = strstr(text, " in ");
        skip = 4;
    } else {
        spec->negate = true;
    }
    if (in) {
        *in = '\0';
        spec->attribute = text;
        char *list = in + skip;
        while (*list == ' ') list++;
        size_t len = strlen(list);
        if (*list != '{' || len < 2 || list[len - 1] != '}') return -1;
        list[len - 1] = '\0';
        for (char *save = NULL, *v = strtok_r(list + 1, ",", &save); v; v = strtok_r(NULL, ",", &save)) {
            while (*v == ' ') v++;
            for (char *end = v + strlen(v); end > v && end[-1] == ' ';) *--end = '\0';
            if (spec->num_values == max_values) return -1;
            values[spec->num_values++] = v;
        }
        spec->op = ISN_FILTER_EQ;
        return spec->num_values ? 0 : -1;
    }
    static const struct {
        const char *text;
        isn_filter_op op;
        bool negate;
    } ops[] = {{"!=", ISN_FILTER_EQ, true}, {">=", ISN_FILTER_GE, false}, {"<=", ISN_FILTER_LE, false},
               {"=", ISN_FILTER_EQ, false}, {">", ISN_FILTER_GT, false}, {"<", ISN_FILTER_LT, false}};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        char *at = strstr(text, ops[i].text);
        if (!at || at == text) continue;
        *at = '\0';
        spec->attribute = text;
        spec->op = ops[i].op;
        spec->negate = ops[i].negate;
        values[0] = at + strlen(ops[i].text);
        spec->num_values = 1;
        return 0;
    }
    return -1;
}
