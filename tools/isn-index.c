/* isn-index: build, inspect and verify ISN index partitions. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "conf/conf.h"
#include "index/index.h"

#define FIELD_CHECK_RECORDS 1000

static void usage(FILE *out) {
    fputs("usage:\n"
          "  isn-index build --input FILE --out DIR [options]\n"
          "      --format jsonl|tsv      input format (default jsonl; tsv is id<TAB>text)\n"
          "      --fields a,b,...        JSONL keys to index, in order (default title,body)\n"
          "      --store a,b,...         also keep these fields' text (among --fields; tsv: body),\n"
          "                              compressed, for replies to show (default none)\n"
          "      --attribute NAME:keyword|int   keep this JSONL key per document for filters (repeatable;\n"
          "                              keywords as ids, integers bit-packed; in DIR/attributes.isn)\n"
          "      --id-field KEY          JSONL key of the external id (default id)\n"
          "      --static-score KEY      JSONL key of a numeric document prior\n"
          "      --no-stem               no Snowball English stemming\n"
          "      --no-stopwords          keep English stopwords\n"
          "      --max-token-bytes N     cut longer tokens (default 64, at most 255)\n"
          "      --no-positions          do not store positions (smaller; no proximity features)\n"
          "      --order input|static|id|bp|global  document id order (default input; bp: recursive graph\n"
          "                              bisection, smaller and faster, multi-threaded; global: by decreasing\n"
          "                              global score, the best BM25 term part plus the weighted static score,\n"
          "                              with score bounds for early termination)\n"
          "      --prior-weight W        --order global: the static score's weight (default 1)\n"
          "      --k1 X --b X            BM25 parameters for block maxima (default 1.2, 0.75)\n"
          "      --partitions N          write N partitions DIR/part-0000... (default 1)\n"
          "      --split hash|contiguous how records are split into partitions (default hash)\n"
          "      --strict                a bad record is fatal instead of skipped\n"
          "      --threads N             parse and analyse on N threads (default 1)\n"
          "      --memory SIZE           bound the build's memory (e.g. 64MiB, 16GiB): documents are inverted\n"
          "                              in runs that fit, written to temporary files in the output folder\n"
          "                              and merged; the index has the same bytes whatever N and SIZE are\n"
          "                              (default: no bound; with --threads 1 everything stays in memory)\n"
          "      --quiet                 no progress line\n"
          "  isn-index info DIR        counts, sizes, analyzer and BM25 parameters\n"
          "  isn-index import-ciff FILE --out DIR [options]   a CIFF file (Anserini, PISA, Terrier...) as an index\n"
          "      --analyzer pretokenized|english  how queries are analysed (default pretokenized: terms separated\n"
          "                              by spaces, matched exactly); english: ISN's English analyzer, when the\n"
          "                              CIFF's terms came from a matching one (Lucene's EnglishAnalyzer)\n"
          "      --no-stem --no-stopwords  with --analyzer english: the analyzer without them\n"
          "      --k1 X --b X            BM25 parameters for block maxima (default 1.2, 0.75)\n"
          "      --order input|global    the file's doc ids (default), or by decreasing global score with\n"
          "                              score bounds (one more pass over the lists)\n"
          "  isn-index export-ciff DIR --out FILE   the index as a CIFF file\n"
          "  isn-index verify DIR      checksums and structural checks\n"
          "  isn-index synth --docs N --out DIR [options]   synthetic partition + DIR/queries.tsv\n"
          "      --seed S --vocab N --zipf X --postings-per-doc X --mean-len X --len-sigma X\n"
          "      --fit INDEX_DIR [--fit-queries QUERIES.tsv] --queries N --threads N\n"
          "      --transplant-queries    with --fit-queries: the log's own queries in order (at most N), each\n"
          "                              distinct term its own synthetic term (default: N draws of its queries,\n"
          "                              terms of a similar df merged into the one nearest it)\n"
          "      --order input|global    global: documents by decreasing global score, with score bounds\n"
          "      --prior lognormal:SIGMA a static score per document, exp(SIGMA x N(0,1)) from the seed (median 1;\n"
          "                              SIGMA 0..8); in global order GS = P + W x it, W from --prior-weight\n"
          "                              (default 1); with --jsonl each record's \"prior\" (build --static-score prior)\n"
          "  isn-index synth --jsonl --docs N --out FILE [options]   the same model as JSON Lines text to index\n"
          "      (FILE - is standard output); --queries-out FILE writes a query log over its terms; same options\n",
          out);
}

/* A --fields name (or --id-field) that none of the first records has is a typo, not a choice: the
 * build would skip every record. Names the keys the records do have. 0, or -1 after saying why. */
static int check_fields(const char *input, const isn_build_options *o) {
    FILE *f = fopen(input, "r");
    if (!f) return 0; /* the build says why it cannot open it */
    bool seen[ISN_MAX_FIELDS + 1] = {false};
    char keys[512] = "";
    size_t keys_len = 0;
    char *line = NULL;
    size_t cap = 0;
    for (int records = 0; records < FIELD_CHECK_RECORDS && getline(&line, &cap, f) > 0;) {
        json_t *record = json_loads(line, JSON_DECODE_ANY, NULL);
        if (!json_is_object(record)) {
            json_decref(record);
            continue;
        }
        records++;
        for (uint32_t i = 0; i < o->num_fields; i++) seen[i] |= json_object_get(record, o->fields[i]) != NULL;
        seen[ISN_MAX_FIELDS] |= json_object_get(record, o->id_field) != NULL;
        const char *key;
        json_t *value;
        json_object_foreach(record, key, value) {
            (void)value;
            size_t n = strlen(key);
            bool listed = false;
            for (const char *k = keys; !listed && (k = strstr(k, key)); k += n)
                listed = (k == keys || k[-1] == ' ') && (k[n] == ',' || k[n] == '\0');
            if (!listed && keys_len + n + 3 < sizeof keys)
                keys_len += (size_t)snprintf(keys + keys_len, sizeof keys - keys_len, "%s%s", keys_len ? ", " : "", key);
        }
        json_decref(record);
    }
    free(line);
    fclose(f);
    if (!keys_len) return 0; /* no JSON object at all: the build reports the bad records */
    int rc = 0;
    for (uint32_t i = 0; i < o->num_fields; i++)
        if (!seen[i]) {
            fprintf(stderr, "isn-index build: unknown field \"%s\": none of the first %d records has it (their keys: %s)\n",
                    o->fields[i], FIELD_CHECK_RECORDS, keys);
            rc = -1;
        }
    if (!seen[ISN_MAX_FIELDS]) {
        fprintf(stderr, "isn-index build: unknown --id-field \"%s\": none of the first %d records has it (their keys: %s)\n",
                o->id_field, FIELD_CHECK_RECORDS, keys);
        rc = -1;
    }
    return rc;
}

/* A comma-separated list of field names (--fields, --store) into names[], *count of them. */
static int parse_names(const char *list, const char *flag, char names[ISN_MAX_FIELDS][ISN_FIELD_NAME_MAX], uint32_t *count) {
    *count = 0;
    const char *p = list;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= ISN_FIELD_NAME_MAX || *count == ISN_MAX_FIELDS) {
            fprintf(stderr, "isn-index: %s: each name 1..%d bytes, at most %d fields\n", flag, ISN_FIELD_NAME_MAX - 1, ISN_MAX_FIELDS);
            return -1;
        }
        memcpy(names[*count], p, len);
        names[*count][len] = 0;
        (*count)++;
        p += len + (comma ? 1 : 0);
    }
    if (*count == 0) {
        fprintf(stderr, "isn-index: %s is empty\n", flag);
        return -1;
    }
    return 0;
}

static int copy_name(char *dst, const char *src, const char *flag) {
    if (strlen(src) >= ISN_FIELD_NAME_MAX) {
        fprintf(stderr, "isn-index: %s is longer than %d bytes\n", flag, ISN_FIELD_NAME_MAX - 1);
        return -1;
    }
    strcpy(dst, src);
    return 0;
}

/* A flag's number in [lo, hi]; otherwise says so as `command` ("isn-index synth") and returns -1. */
static int parse_in_range(const char *command, const char *s, const char *flag, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (*s == 0 || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s must be a number in [%g, %g], got '%s'\n", command, flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *s, const char *flag, float lo, float hi, float *out) {
    double v;
    if (parse_in_range("isn-index", s, flag, lo, hi, &v)) return -1;
    *out = (float)v;
    return 0;
}

static int cmd_build(int argc, char **argv) {
    isn_build_options o;
    isn_build_options_default(&o);
    o.progress = true;
    const char *input = NULL, *out = NULL;
    static const struct option opts[] = {
        {"input", 1, 0, 'i'}, {"out", 1, 0, 'o'}, {"format", 1, 0, 'f'}, {"fields", 1, 0, 'F'}, {"store", 1, 0, 'T'},
        {"id-field", 1, 0, 'I'}, {"static-score", 1, 0, 'S'}, {"no-stem", 0, 0, 's'}, {"no-stopwords", 0, 0, 'w'},
        {"max-token-bytes", 1, 0, 'm'}, {"no-positions", 0, 0, 'p'}, {"order", 1, 0, 'O'}, {"k1", 1, 0, 'k'},
        {"b", 1, 0, 'b'}, {"partitions", 1, 0, 'P'}, {"split", 1, 0, 'x'}, {"strict", 0, 0, 'X'},
        {"quiet", 0, 0, 'q'}, {"threads", 1, 0, 't'}, {"memory", 1, 0, 'M'}, {"attribute", 1, 0, 'A'}, {"prior-weight", 1, 0, 'W'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        unsigned long n;
        char size_err[ISN_ERR_LEN];
        switch (c) {
        case 'i': input = optarg; break;
        case 'o': out = optarg; break;
        case 'f':
            if (strcmp(optarg, "jsonl") == 0) o.format = ISN_FORMAT_JSONL;
            else if (strcmp(optarg, "tsv") == 0) o.format = ISN_FORMAT_TSV;
            else return fprintf(stderr, "isn-index: --format must be jsonl or tsv, got '%s'\n", optarg), 2;
            break;
        case 'F': if (parse_names(optarg, "--fields", o.fields, &o.num_fields)) return 2; break;
        case 'T': if (parse_names(optarg, "--store", o.stored, &o.num_stored)) return 2; break;
        case 'A': {
            const char *colon = strchr(optarg, ':');
            isn_attribute_spec *spec = &o.attributes[o.num_attributes];
            if (o.num_attributes == ISN_MAX_ATTRIBUTES)
                return fprintf(stderr, "isn-index: at most %d --attribute\n", ISN_MAX_ATTRIBUTES), 2;
            if (!colon || colon == optarg || (size_t)(colon - optarg) >= sizeof spec->name ||
                (strcmp(colon + 1, "keyword") != 0 && strcmp(colon + 1, "int") != 0))
                return fprintf(stderr, "isn-index: --attribute takes NAME:keyword or NAME:int, got '%s'\n", optarg), 2;
            snprintf(spec->name, sizeof spec->name, "%.*s", (int)(colon - optarg), optarg);
            spec->kind = strcmp(colon + 1, "int") == 0 ? ISN_ATTRIBUTE_INT : ISN_ATTRIBUTE_KEYWORD;
            o.num_attributes++;
            break;
        }
        case 'I': if (copy_name(o.id_field, optarg, "--id-field")) return 2; break;
        case 'S': if (copy_name(o.static_score_field, optarg, "--static-score")) return 2; break;
        case 's': o.analyzer.stem = false; break;
        case 'w': o.analyzer.stopwords = false; break;
        case 'm':
            n = strtoul(optarg, &end, 10);
            if (*end || n < 1 || n > 255) return fprintf(stderr, "isn-index: --max-token-bytes must be 1..255\n"), 2;
            o.analyzer.max_token_bytes = (uint32_t)n;
            break;
        case 'p': o.positions = false; break;
        case 'O':
            if (strcmp(optarg, "input") == 0) o.order = ISN_ORDER_INPUT;
            else if (strcmp(optarg, "static") == 0) o.order = ISN_ORDER_STATIC;
            else if (strcmp(optarg, "id") == 0) o.order = ISN_ORDER_ID;
            else if (strcmp(optarg, "bp") == 0) o.order = ISN_ORDER_BP;
            else if (strcmp(optarg, "global") == 0) o.order = ISN_ORDER_GLOBAL;
            else return fprintf(stderr, "isn-index: --order must be input, static, id, bp or global, got '%s'\n", optarg), 2;
            break;
        case 'W': if (parse_float(optarg, "--prior-weight", 0.0f, 1e30f, &o.prior_weight)) return 2; break;
        case 'k': if (parse_float(optarg, "--k1", 0.0f, 100.0f, &o.bm25.k1)) return 2; break;
        case 'b': if (parse_float(optarg, "--b", 0.0f, 1.0f, &o.bm25.b)) return 2; break;
        case 'P':
            n = strtoul(optarg, &end, 10);
            if (*end || n < 1 || n > 4096) return fprintf(stderr, "isn-index: --partitions must be 1..4096\n"), 2;
            o.partitions = (uint32_t)n;
            break;
        case 'x':
            if (strcmp(optarg, "hash") == 0) o.split = ISN_SPLIT_HASH;
            else if (strcmp(optarg, "contiguous") == 0) o.split = ISN_SPLIT_CONTIGUOUS;
            else return fprintf(stderr, "isn-index: --split must be hash or contiguous\n"), 2;
            break;
        case 'X': o.strict = true; break;
        case 'q': o.progress = false; break;
        case 't':
            n = strtoul(optarg, &end, 10);
            if (*optarg == 0 || *end || n < 1 || n > 256) return fprintf(stderr, "isn-index: --threads must be 1..256, got '%s'\n", optarg), 2;
            o.threads = (uint32_t)n;
            break;
        case 'M':
            if ((size_err[0] = 0, isn_conf_parse_size(optarg, &o.memory_bytes, size_err, sizeof size_err)) != 0 || o.memory_bytes == 0)
                return fprintf(stderr, "isn-index: --memory: %s\n", o.memory_bytes == 0 && !size_err[0] ? "must be more than 0" : size_err), 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!input || !out) {
        fprintf(stderr, "isn-index build: --input and --out are required\n");
        return 2;
    }
    if (o.order == ISN_ORDER_STATIC && !o.static_score_field[0]) {
        fprintf(stderr, "isn-index build: --order static needs --static-score KEY\n");
        return 2;
    }
    if (o.format == ISN_FORMAT_JSONL && strcmp(input, "-") != 0 && check_fields(input, &o) != 0) return 2;
    if (strcmp(input, "-") == 0 && o.threads <= 1 && o.memory_bytes == 0) {
        fprintf(stderr, "isn-index build: --input - (standard input) needs --threads or --memory\n");
        return 2;
    }
    isn_build_options effective = o;
    if (o.format == ISN_FORMAT_TSV) { /* one field, "body" */
        effective.num_fields = 1;
        snprintf(effective.fields[0], ISN_FIELD_NAME_MAX, "body");
    }
    char invalid[ISN_ERR_LEN];
    if (isn_build_options_check(&effective, invalid, sizeof invalid) != 0) {
        fprintf(stderr, "isn-index build: --store: %s\n", invalid);
        return 2;
    }
    isn_build_summary s;
    char err[ISN_ERR_LEN];
    if (isn_build_from_file(input, out, &o, &s, err, sizeof err) != 0) {
        fprintf(stderr, "isn-index build: %s\n", err);
        return 1;
    }
    printf("{\"records\":%llu,\"skipped\":%llu,\"docs\":%llu,\"terms\":%llu,\"postings\":%llu,\"tokens\":%llu,"
           "\"partitions\":%u,\"bytes\":{\"total\":%llu,\"postings\":%llu,\"block_meta\":%llu,\"positions\":%llu,"
           "\"lexicon\":%llu,\"docs\":%llu,\"stored\":%llu},\"runs\":%llu,\"seconds\":%.3f}\n",
           (unsigned long long)s.records_read, (unsigned long long)s.records_skipped, (unsigned long long)s.docs,
           (unsigned long long)s.terms, (unsigned long long)s.postings, (unsigned long long)s.tokens, o.partitions,
           (unsigned long long)s.bytes_total, (unsigned long long)s.bytes_postings, (unsigned long long)s.bytes_block_meta,
           (unsigned long long)s.bytes_positions, (unsigned long long)s.bytes_lexicon, (unsigned long long)s.bytes_docs,
           (unsigned long long)s.bytes_stored, (unsigned long long)s.runs, s.seconds);
    if (s.records_read && !s.docs) {
        fprintf(stderr, "isn-index build: every record was skipped: none had text in the fields --fields names\n");
        return 1;
    }
    return 0;
}

/* Opens DIR for `command` ("info"); NULL after saying why. */
static isn_index *open_index(const char *command, const char *dir) {
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fprintf(stderr, "isn-index %s: %s\n", command, err);
    return ix;
}

static int cmd_info(const char *dir) {
    isn_index *ix = open_index("info", dir);
    if (!ix) return 1;
    const isn_index_info *in = isn_index_get_info(ix);
    printf("index          %s (format version %u)\n", dir, in->version);
    printf("documents      %u\n", in->num_docs);
    printf("terms          %u\n", in->num_terms);
    printf("postings       %llu in %llu blocks of %d\n", (unsigned long long)in->num_postings,
           (unsigned long long)in->num_blocks, ISN_BLOCK_SIZE);
    printf("tokens         %llu (average document length %.2f)\n", (unsigned long long)in->total_doc_len, in->avg_doc_len);
    printf("fields        ");
    for (uint32_t f = 0; f < in->num_fields; f++) printf(" %s (avg %.2f)", in->fields[f], in->avg_field_len[f]);
    if (in->analyzer.pretokenized)
        printf("\nanalyzer       pretokenized: the terms were analysed outside ISN (CIFF import); a query is its terms\n"
               "               separated by spaces, each matched exactly as written (no case folding, stemming or\n"
               "               stopwords), tokens cut at %u bytes\n", in->analyzer.max_token_bytes);
    else
        printf("\nanalyzer       stemming %s, stopwords %s, max token %u bytes%s\n", in->analyzer.stem ? "english" : "off",
               in->analyzer.stopwords ? "english" : "kept", in->analyzer.max_token_bytes,
               in->external_terms ? "\n               (terms analysed outside ISN and imported from CIFF; this analyzer was "
                                    "declared at import to match them)" : "");
    printf("bm25           k1 %.3g, b %.3g\n", in->bm25.k1, in->bm25.b);
    printf("positions      %s; static scores %s; score bounds %s\n", in->has_positions ? "yes" : "no",
           in->has_static_scores ? "yes" : "no", in->has_score_bounds ? "yes (global order)" : "no");
    printf("stored fields ");
    for (uint32_t f = 0; f < in->num_stored_fields; f++) printf(" %s", in->stored_fields[f]);
    printf("%s\n", in->num_stored_fields ? "" : " none");
    printf("attributes    ");
    for (uint32_t a = 0; a < isn_index_num_attributes(ix); a++) {
        isn_attribute_kind kind;
        const char *name = isn_index_attribute_name(ix, a);
        isn_index_attribute_find(ix, name, &kind);
        printf(" %s:%s", name, kind == ISN_ATTRIBUTE_INT ? "int" : "keyword");
    }
    printf("%s\n", isn_index_num_attributes(ix) ? "" : " none");
    printf("file bytes     %llu\n", (unsigned long long)in->file_bytes);
    for (uint32_t s = 0; s < in->num_sections; s++)
        printf("  %-12s %llu\n", in->sections[s].name, (unsigned long long)in->sections[s].bytes);
    isn_index_close(ix);
    return 0;
}

static int cmd_verify(const char *dir) {
    isn_index *ix = open_index("verify", dir);
    if (!ix) return 1;
    char err[ISN_ERR_LEN];
    int rc = isn_index_verify_threads(ix, isn_cpus_available(), err, sizeof err);
    if (rc != 0) fprintf(stderr, "isn-index verify: %s: %s\n", dir, err);
    else printf("%s: OK (%u documents, %u terms, %llu postings)\n", dir, isn_index_get_info(ix)->num_docs,
                isn_index_get_info(ix)->num_terms, (unsigned long long)isn_index_get_info(ix)->num_postings);
    isn_index_close(ix);
    return rc ? 1 : 0;
}

static int cmd_import_ciff(int argc, char **argv) {
    isn_ciff_import_options o;
    isn_ciff_import_options_default(&o);
    const char *out = NULL;
    bool english = false, no_stem = false, no_stopwords = false;
    static const struct option opts[] = {{"out", 1, 0, 'o'}, {"analyzer", 1, 0, 'a'}, {"no-stem", 0, 0, 's'},
                                         {"no-stopwords", 0, 0, 'w'}, {"k1", 1, 0, 'k'}, {"b", 1, 0, 'b'},
                                         {"order", 1, 0, 'r'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'a':
            if (strcmp(optarg, "pretokenized") == 0) english = false;
            else if (strcmp(optarg, "english") == 0) english = true;
            else return fprintf(stderr, "isn-index import-ciff: --analyzer must be pretokenized or english, got '%s'\n", optarg), 2;
            break;
        case 's': no_stem = true; break;
        case 'w': no_stopwords = true; break;
        case 'k': if (parse_float(optarg, "--k1", 0.0f, 100.0f, &o.bm25.k1)) return 2; break;
        case 'b': if (parse_float(optarg, "--b", 0.0f, 1.0f, &o.bm25.b)) return 2; break;
        case 'r':
            if (strcmp(optarg, "input") == 0) o.order = ISN_ORDER_INPUT;
            else if (strcmp(optarg, "global") == 0) o.order = ISN_ORDER_GLOBAL;
            else return fprintf(stderr, "isn-index import-ciff: --order must be input or global, got '%s'\n", optarg), 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!out || optind != argc - 1) {
        fprintf(stderr, "isn-index import-ciff: give one CIFF file and --out DIR\n");
        return 2;
    }
    if ((no_stem || no_stopwords) && !english) {
        fprintf(stderr, "isn-index import-ciff: --no-stem and --no-stopwords go with --analyzer english\n");
        return 2;
    }
    if (english) {
        o.analyzer.pretokenized = false;
        o.analyzer.stem = !no_stem;
        o.analyzer.stopwords = !no_stopwords;
    }
    isn_ciff_summary s;
    memset(&s, 0, sizeof s);
    char err[ISN_ERR_LEN];
    if (isn_ciff_import(argv[optind], out, &o, &s, err, sizeof err) != 0) {
        fprintf(stderr, "isn-index import-ciff: %s\n", err);
        return 1;
    }
    json_t *summary = json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:s, s:s}", "postings_lists", (json_int_t)s.postings_lists,
                                "docs", (json_int_t)s.docs, "postings", (json_int_t)s.postings, "ciff_bytes",
                                (json_int_t)s.ciff_bytes, "index_bytes", (json_int_t)s.index_bytes, "seconds", s.seconds,
                                "analyzer", english ? "english" : "pretokenized", "description", s.description);
    char *text = summary ? json_dumps(summary, JSON_COMPACT) : NULL;
    if (text) puts(text);
    free(text);
    json_decref(summary);
    return 0;
}

static int cmd_export_ciff(int argc, char **argv) {
    const char *out = NULL;
    static const struct option opts[] = {{"out", 1, 0, 'o'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!out || optind != argc - 1) {
        fprintf(stderr, "isn-index export-ciff: give one index directory and --out FILE\n");
        return 2;
    }
    isn_ciff_summary s;
    char err[ISN_ERR_LEN];
    if (isn_ciff_export(argv[optind], out, &s, err, sizeof err) != 0) {
        fprintf(stderr, "isn-index export-ciff: %s\n", err);
        return 1;
    }
    printf("{\"postings_lists\":%llu,\"docs\":%llu,\"postings\":%llu,\"ciff_bytes\":%llu,\"seconds\":%.3f}\n",
           (unsigned long long)s.postings_lists, (unsigned long long)s.docs, (unsigned long long)s.postings,
           (unsigned long long)s.ciff_bytes, s.seconds);
    return 0;
}

static int parse_number(const char *s, const char *flag, double lo, double hi, double *out) {
    return parse_in_range("isn-index synth", s, flag, lo, hi, out);
}

static int cmd_synth(int argc, char **argv) {
    isn_synth_options o;
    isn_synth_options_default(&o);
    const char *out = NULL;
    static const struct option opts[] = {
        {"docs", 1, 0, 'd'}, {"seed", 1, 0, 's'}, {"vocab", 1, 0, 'v'}, {"zipf", 1, 0, 'z'},
        {"postings-per-doc", 1, 0, 'p'}, {"mean-len", 1, 0, 'l'}, {"len-sigma", 1, 0, 'g'}, {"fit", 1, 0, 'f'},
        {"fit-queries", 1, 0, 'q'}, {"queries", 1, 0, 'Q'}, {"threads", 1, 0, 't'}, {"out", 1, 0, 'o'},
        {"jsonl", 0, 0, 'j'}, {"queries-out", 1, 0, 'O'}, {"order", 1, 0, 'r'}, {"help", 0, 0, 'h'},
        {"prior", 1, 0, 'P'}, {"prior-weight", 1, 0, 'W'}, {"transplant-queries", 0, 0, 'T'}, {0, 0, 0, 0}};
    bool jsonl = false;
    const char *queries_out = NULL;
    int c;
    double v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd': if (parse_number(optarg, "--docs", 1, 4e9, &v)) return 2; o.docs = (uint32_t)v; break;
        case 's': if (parse_number(optarg, "--seed", 0, 1.8e19, &v)) return 2; o.seed = (uint64_t)v; break;
        case 'v': if (parse_number(optarg, "--vocab", 1, 2e7, &v)) return 2; o.vocabulary = (uint32_t)v; break;
        case 'z': if (parse_number(optarg, "--zipf", 0.01, 4, &o.zipf_exponent)) return 2; break;
        case 'p': if (parse_number(optarg, "--postings-per-doc", 0.01, 10000, &o.postings_per_doc)) return 2; break;
        case 'l': if (parse_number(optarg, "--mean-len", 1, 1e6, &o.mean_doc_len)) return 2; break;
        case 'g': if (parse_number(optarg, "--len-sigma", 0, 3, &o.doc_len_sigma)) return 2; break;
        case 'f': o.fit_index = optarg; break;
        case 'q': o.fit_queries = optarg; break;
        case 'Q': if (parse_number(optarg, "--queries", 0, 1e8, &v)) return 2; o.queries = (uint32_t)v; break;
        case 't': if (parse_number(optarg, "--threads", 1, 256, &v)) return 2; o.threads = (uint32_t)v; break;
        case 'o': out = optarg; break;
        case 'j': jsonl = true; break;
        case 'r':
            if (strcmp(optarg, "input") == 0) o.order = ISN_ORDER_INPUT;
            else if (strcmp(optarg, "global") == 0) o.order = ISN_ORDER_GLOBAL;
            else return fprintf(stderr, "isn-index synth: --order must be input or global, got '%s'\n", optarg), 2;
            break;
        case 'O': queries_out = optarg; break;
        case 'P':
            if (strncmp(optarg, "lognormal:", 10) != 0) {
                fprintf(stderr, "isn-index synth: --prior takes lognormal:SIGMA, got '%s'\n", optarg);
                return 2;
            }
            if (parse_number(optarg + 10, "--prior lognormal:SIGMA", 0, 8, &o.prior_sigma)) return 2;
            break;
        case 'W': if (parse_float(optarg, "--prior-weight", 0.0f, 1e30f, &o.prior_weight)) return 2; break;
        case 'T': o.transplant_queries = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!out || o.docs == 0) {
        fprintf(stderr, "isn-index synth: --docs N and --out %s are required\n", jsonl ? "FILE" : "DIR");
        return 2;
    }
    if (o.transplant_queries && !o.fit_queries) {
        fprintf(stderr, "isn-index synth: --transplant-queries needs --fit-queries (the log it transplants)\n");
        return 2;
    }
    if (jsonl && o.order != ISN_ORDER_INPUT) {
        fprintf(stderr, "isn-index synth: --order goes with a partition, not --jsonl (give it to isn-index build)\n");
        return 2;
    }
    if (queries_out && !jsonl) {
        fprintf(stderr, "isn-index synth: --queries-out goes with --jsonl (a partition's queries go to DIR/queries.tsv)\n");
        return 2;
    }
    if (jsonl) {
        isn_synth_text_summary text;
        char err[ISN_ERR_LEN];
        if (isn_synth_jsonl(out, queries_out, &o, &text, err, sizeof err) != 0) {
            fprintf(stderr, "isn-index synth: %s\n", err);
            return 1;
        }
        fprintf(strcmp(out, "-") == 0 ? stderr : stdout,
                "{\"docs\": %llu, \"vocabulary\": %llu, \"postings\": %llu, \"tokens\": %llu, \"bytes\": %llu, \"seconds\": %.2f}\n",
                (unsigned long long)text.docs, (unsigned long long)text.vocabulary, (unsigned long long)text.postings,
                (unsigned long long)text.tokens, (unsigned long long)text.bytes, text.seconds);
        return 0;
    }
    isn_build_summary sum;
    memset(&sum, 0, sizeof sum);
    char err[ISN_ERR_LEN];
    if (isn_synth_build(out, &o, &sum, err, sizeof err) != 0) {
        fprintf(stderr, "isn-index synth: %s\n", err);
        return 1;
    }
    printf("{\"docs\": %llu, \"terms\": %llu, \"postings\": %llu, \"bytes_total\": %llu, \"bytes_postings\": %llu, "
           "\"seconds\": %.2f}\n",
           (unsigned long long)sum.docs, (unsigned long long)sum.terms, (unsigned long long)sum.postings,
           (unsigned long long)sum.bytes_total, (unsigned long long)sum.bytes_postings, sum.seconds);
    return 0;
}

int main(int argc, char **argv) {
    /* A file size limit (ulimit -f) then fails a write with EFBIG, said as an error, instead of killing. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "build") == 0) return cmd_build(argc - 1, argv + 1);
    if (strcmp(argv[1], "synth") == 0) return cmd_synth(argc - 1, argv + 1);
    if (strcmp(argv[1], "import-ciff") == 0) return cmd_import_ciff(argc - 1, argv + 1);
    if (strcmp(argv[1], "export-ciff") == 0) return cmd_export_ciff(argc - 1, argv + 1);
    if ((strcmp(argv[1], "info") == 0 || strcmp(argv[1], "verify") == 0) && argc == 3)
        return argv[1][0] == 'i' ? cmd_info(argv[2]) : cmd_verify(argv[2]);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "info") && strcmp(argv[1], "verify"))
        fprintf(stderr, "isn-index: unknown command \"%s\" (commands: build, info, verify, synth, import-ciff, export-ciff; --help)\n", argv[1]);
    else
        fprintf(stderr, "isn-index %s: give exactly one index directory\n", argv[1]);
    return 2;
}
