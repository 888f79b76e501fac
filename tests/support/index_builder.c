#include "tests/support/index_builder.h"

#include <ftw.h>
#include <stdio.h>

void support_plain_build_options(isn_build_options *options) {
    isn_build_options_default(options);
    options->num_fields = 1;
    snprintf(options->fields[0], sizeof options->fields[0], "body");
    options->analyzer.stem = false;
    options->analyzer.stopwords = false;
    options->order = ISN_ORDER_INPUT;
    options->positions = false;
    options->partitions = 1;
    options->progress = false;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int support_remove_tree(const char *dir) {
    return nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}
