#include "tests/support/files.h"

#include <ftw.h>
#include <stdio.h>

int support_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) != 0 ? -1 : rc;
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
