#include "loopback_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* The servers under fuzzing close many connections first, and each leaves its address pair in TIME_WAIT
 * for a minute: one source address would run out of ports within seconds. Closed with a reset
 * (SO_LINGER 0) so that the client side leaves none either. */
int fuzz_connect_loopback(int port) {
    static uint32_t next;
    for (int attempt = 0; attempt < 250; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) abort();
        struct linger reset = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        struct sockaddr_in from = {.sin_family = AF_INET};
        from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + next++ % 250);
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(fd, (struct sockaddr *)&from, sizeof from) == 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            return fd;
        close(fd);
    }
    abort();
}
