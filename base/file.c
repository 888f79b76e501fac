/* Opening files that must be regular files (indexes, configurations, models). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

int isn_open_regular(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -1;
    struct stat st;
    int error = 0;
    if (fstat(fd, &st) != 0) error = errno;
    else if (S_ISDIR(st.st_mode)) error = EISDIR;
    else if (!S_ISREG(st.st_mode)) error = EINVAL;
    if (error) {
        close(fd);
        errno = error;
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

FILE *isn_fopen_regular(const char *path, const char *mode) {
    int fd = isn_open_regular(path);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, mode);
    if (!f) {
        int error = errno;
        close(fd);
        errno = error;
    }
    return f;
}

const char *isn_open_regular_strerror(int error) { return error == EINVAL ? "not a regular file" : strerror(error); }
