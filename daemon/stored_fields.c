/* Stored fields in a Search reply: the request names them, the index keeps them compressed in blocks;
 * the final hits' blocks are decompressed here, on the thread packing the reply, into the request's
 * arena (whose limit bounds what one reply may carry; the reply itself is then charged to the node's
 * memory budget like any other). */
#include <stdio.h>
#include <string.h>

#include "daemon/search_job.h"
#include "grpc/framing.h"

/* The index's stored fields as "title, body", or "none". */
static void stored_names(const isn_index_info *info, char *out, size_t len) {
    snprintf(out, len, "%s", info->num_stored_fields ? "" : "none");
    for (uint32_t i = 0; i < info->num_stored_fields; i++)
        snprintf(out + strlen(out), len - strlen(out), "%s%s", i ? ", " : "", info->stored_fields[i]);
}

int stored_fields_attach(const isn_index *index, const search_job *job, Isn__V1__Hit *hits, uint32_t num_hits,
                         char *err, size_t err_len) {
    const Isn__V1__SearchRequest *request = job->request;
    size_t asked = request->n_stored_fields;
    if (asked == 0) return ISN_GRPC_STATUS_OK;
    const isn_index_info *info = isn_index_get_info(index);
    char names[ISN_MAX_FIELDS * (ISN_FIELD_NAME_MAX + 2) + 8];
    stored_names(info, names, sizeof names);
    if (asked > ISN_MAX_FIELDS) {
        isn_error(err, err_len, "%zu stored_fields asked (at most %d); this index stores: %s", asked, ISN_MAX_FIELDS, names);
        return ISN_GRPC_STATUS_INVALID_ARGUMENT;
    }
    int slots[ISN_MAX_FIELDS];
    for (size_t j = 0; j < asked; j++) {
        const char *name = request->stored_fields[j] ? request->stored_fields[j] : "";
        if ((slots[j] = isn_index_stored_slot(index, name)) < 0) {
            isn_error(err, err_len, "stored field \"%.64s\" is not kept by this index (stored: %s; isn-index build --store)",
                      name, names);
            return ISN_GRPC_STATUS_INVALID_ARGUMENT;
        }
    }
    if (num_hits == 0) return ISN_GRPC_STATUS_OK;
    size_t scratch_bytes = isn_index_stored_scratch_bytes(index);
    void *scratch = job->memory ? arena_alloc(job->memory, scratch_bytes) : NULL;
    Isn__V1__StoredField *fields = job->memory ? arena_alloc(job->memory, num_hits * asked * sizeof *fields) : NULL;
    Isn__V1__StoredField **pointers = job->memory ? arena_alloc(job->memory, num_hits * asked * sizeof *pointers) : NULL;
    if (!scratch || !fields || !pointers) goto over;
    for (uint32_t i = 0; i < num_hits; i++) {
        isn_stored_text texts[ISN_MAX_FIELDS];
        char why[ISN_ERR_LEN];
        if (isn_index_stored_get(index, hits[i].doc, scratch, texts, why, sizeof why) != 0) {
            isn_error(err, err_len, "stored fields of document %u: %s", hits[i].doc, why);
            return ISN_GRPC_STATUS_INTERNAL;
        }
        for (size_t j = 0; j < asked; j++) {
            const isn_stored_text *t = &texts[slots[j]];
            char *value = arena_alloc(job->memory, (size_t)t->len + 1);
            if (!value) goto over;
            memcpy(value, t->text, t->len);
            value[t->len] = '\0';
            Isn__V1__StoredField *field = &fields[i * asked + j];
            isn__v1__stored_field__init(field);
            field->name = request->stored_fields[j];
            field->value = value;
            pointers[i * asked + j] = field;
        }
        hits[i].n_fields = asked;
        hits[i].fields = &pointers[i * asked];
    }
    return ISN_GRPC_STATUS_OK;
over:
    if (job->memory && job->memory->over_budget)
        isn_error(err, err_len, "server memory budget for replies reached (the stored fields of %u hits)", num_hits);
    else
        isn_error(err, err_len, "the stored fields of %u hits exceed this request's memory (blocks of %zu bytes); ask for fewer hits",
                  num_hits, scratch_bytes);
    return ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
}
