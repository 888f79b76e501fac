/* Files for tests: writing a fixture file, removing a temporary directory. */
#ifndef ISN_TESTS_SUPPORT_FILES_H
#define ISN_TESTS_SUPPORT_FILES_H

/* Writes text to path (created or truncated); 0 on success, -1 with errno set. */
int support_write_text(const char *path, const char *text);

/* Removes a test's temporary directory and everything in it; 0 on success. */
int support_remove_tree(const char *dir);

#endif
