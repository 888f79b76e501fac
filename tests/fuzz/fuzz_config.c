/* The configuration parsers: isnd's INI file and --set options (conf/), isn-agg's INI file and keys
 * (agg/config.c), then validation and isnd's writer of the effective configuration. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agg/agg.h"
#include "conf/conf.h"

static char path[64];
static FILE *sink;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(path, sizeof path, "/tmp/isn-fuzz-config-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    sink = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    char err[2048];

    isn_conf conf;
    isn_conf_default(&conf);
    if (isn_conf_load_file(&conf, path, err, sizeof err) == 0 && isn_conf_validate(&conf, err, sizeof err) == 0) {
        isn_conf_write(&conf, sink);
        isn_conf defaults;
        isn_conf_default(&defaults);
        char key[64];
        isn_conf_reloadable(&defaults, &conf, key, sizeof key);
    }
    char option[512];
    size_t n = size < sizeof option - 1 ? size : sizeof option - 1;
    memcpy(option, data, n);
    option[n] = '\0';
    isn_conf_default(&conf);
    isn_conf_set_option(&conf, option, err, sizeof err);
    uint32_t ms;
    uint64_t bytes;
    isn_conf_parse_duration_ms(option, &ms, err, sizeof err);
    isn_conf_parse_size(option, &bytes, err, sizeof err);

    agg_config agg_conf;
    agg_config_default(&agg_conf);
    if (agg_config_load(&agg_conf, path, err, sizeof err) == 0) agg_config_validate(&agg_conf, err, sizeof err);
    return 0;
}
