/* Clients that never read (issue 16): `connections` connections advertise an HTTP/2 window of 0 and a
 * 4 KiB socket receive buffer, send `streams` Search requests each (big replies: a broad query, large
 * k, a stored field when asked) and then read nothing for `hold` seconds, then close. Prints what it managed to send and how many
 * of its connections the server had closed by the end of the hold (seen without reading: POLLRDHUP). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/support/isnd_harness.h"
#include "tests/support/raw_http2.h"

static int usage(void) {
    fprintf(stderr, "usage: attack_never_read PORT CONNECTIONS STREAMS K HOLD_SECONDS QUERY [STORED_FIELD]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) return usage();
    int port = atoi(argv[1]), connections = atoi(argv[2]), streams = atoi(argv[3]), hold_s = atoi(argv[5]);
    long k = atol(argv[4]);
    const char *query = argv[6], *field = argc == 8 && argv[7][0] ? argv[7] : NULL;
    if (port <= 0 || connections <= 0 || streams <= 0 || k <= 0 || hold_s < 0 || strlen(query) >= 128 ||
        (field && strlen(field) >= 128))
        return usage();
    int *fds = calloc((size_t)connections, sizeof *fds);
    if (!fds) return 1;
    const uint32_t settings[] = {SETTINGS_INITIAL_WINDOW_SIZE, 0};
    int opened = 0;
    long sent = 0, send_failures = 0;
    static uint8_t buf[1024];
    int64_t start_ms = harness_now_ms();
    for (int c = 0; c < connections; c++) {
        fds[c] = raw_h2_connect(port, settings, 1);
        if (fds[c] < 0) continue;
        opened++;
        int small = 4096;
        setsockopt(fds[c], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        for (int s = 0; s < streams; s++) {
            if (!raw_h2_send_all(fds[c], buf, raw_h2_search_request(buf, 1 + 2 * (uint32_t)s, query, (uint32_t)k, field))) {
                send_failures++;
                break;
            }
            sent++;
        }
    }
    int64_t send_ms = harness_now_ms() - start_ms;
    harness_sleep_ms(hold_s * 1000);
    int closed_by_server = 0;
    for (int c = 0; c < connections; c++) {
        if (fds[c] < 0) continue;
        struct pollfd p = {.fd = fds[c], .events = POLLRDHUP};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) closed_by_server++;
        close(fds[c]);
    }
    printf("{\"connections_opened\": %d, \"requests_sent\": %ld, \"send_failures\": %ld, "
           "\"send_ms\": %lld, \"closed_by_server_at_end\": %d}\n",
           opened, sent, send_failures, (long long)send_ms, closed_by_server);
    free(fds);
    return 0;
}
