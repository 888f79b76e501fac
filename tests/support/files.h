/* Files for tests: writing a fixture file, reading and writing whole files (to damage them), removing a
 * temporary directory, running a command. */
#ifndef ISN_TESTS_SUPPORT_FILES_H
#define ISN_TESTS_SUPPORT_FILES_H

#include <stddef.h>
#include <stdint.h>

/* Writes text to path (created or truncated); 0 on success, -1 with errno set. */
int support_write_text(const char *path, const char *text);

/* The whole file (malloc'd, *len bytes), or NULL. */
uint8_t *support_read_file(const char *path, size_t *len);
/* Writes len bytes to path (created or truncated); 0 on success, -1 with errno set. */
int support_write_file(const char *path, const uint8_t *data, size_t len);

/* Removes a test's temporary directory and everything in it; 0 on success. */
int support_remove_tree(const char *dir);

/* Runs a shell command; its exit status (0 = success), said on stderr when not 0. */
int support_run_command(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
