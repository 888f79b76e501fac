/* What the socket-fed fuzz targets share: a fresh loopback connection per input. */
#ifndef ISN_TESTS_FUZZ_LOOPBACK_CLIENT_H
#define ISN_TESTS_FUZZ_LOOPBACK_CLIENT_H

/* A connection to 127.0.0.1:port from a source address that changes every call (127.0.0.1 to
 * 127.0.0.250); aborts when none can be made. */
int fuzz_connect_loopback(int port);

#endif
