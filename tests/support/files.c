#include "tests/support/files.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int support_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) != 0 ? -1 : rc;
}

uint8_t *support_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    uint8_t *data = size >= 0 ? malloc((size_t)size + 1) : NULL;
    rewind(f);
    if (data && fread(data, 1, (size_t)size, f) != (size_t)size) {
        free(data);
        data = NULL;
    }
    fclose(f);
    if (data) *len = (size_t)size;
    return data;
}

int support_write_file(const char *path, const uint8_t *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    int rc = fwrite(data, 1, len, f) == len ? 0 : -1;
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

int support_run_command(const char *fmt, ...) {
    char command[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(command, sizeof command, fmt, ap);
    va_end(ap);
    int rc = system(command);
    if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, command);
    return rc;
}
