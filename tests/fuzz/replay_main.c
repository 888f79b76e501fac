/* Replays fuzz inputs through a target without libFuzzer (gcc builds, `make test`): every file of
 * the target's seed corpus and regression folders, or the files and folders given. A crash or a
 * sanitizer report fails the run; the file being replayed is printed first. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    uint8_t *data = malloc(len > 0 ? (size_t)len : 1);
    size_t got = data ? fread(data, 1, (size_t)len, f) : 0;
    fclose(f);
    if (!data) return -1;
    fprintf(stderr, "replay %s (%zu bytes)\n", path, got);
    LLVMFuzzerTestOneInput(data, got);
    free(data);
    return 1;
}

static int replay_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return replay_file(path);
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, de->d_name);
        n += replay_path(child);
    }
    if (d) closedir(d);
    return n;
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int n = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++) n += replay_path(argv[i]);
    } else {
        n += replay_path("tests/fuzz/corpus/" FUZZ_NAME);
        n += replay_path("tests/fuzz/regressions/" FUZZ_NAME);
    }
    printf("fuzz replay %s: %d inputs, no crash\n", FUZZ_NAME, n);
    return n > 0 ? 0 : 1;
}
