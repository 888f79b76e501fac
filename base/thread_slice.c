/* A thread's scheduler slice, real-time priority or idle policy, and its wait for a CPU (base.h:
 * isn_set_this_thread_slice, isn_thread_slice_ns, isn_set_this_thread_realtime, isn_thread_realtime_priority,
 * isn_set_this_thread_idle_policy, isn_thread_has_idle_policy, isn_thread_cpu_wait_ns). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <linux/sched.h>
#include <linux/sched/types.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/base.h"

static int get_attr(pid_t tid, struct sched_attr *attr) {
    memset(attr, 0, sizeof *attr);
    return (int)syscall(SYS_sched_getattr, tid, attr, sizeof *attr, 0);
}

int isn_set_this_thread_slice(uint64_t ns, char *err, size_t err_len) {
    struct sched_attr attr;
    if (get_attr(0, &attr) < 0) return isn_error(err, err_len, "sched_getattr: %s", strerror(errno));
    if (attr.sched_policy != SCHED_NORMAL)
        return isn_error(err, err_len, "the thread is not of the normal scheduling policy (policy %u)",
                         attr.sched_policy);
    /* The nice value stays as it is (sched_setattr sets it too); the threads this one starts later
     * (a swap's background work, say) begin with the kernel's slice, not this one. */
    attr.size = sizeof attr;
    attr.sched_flags = SCHED_FLAG_RESET_ON_FORK;
    attr.sched_runtime = ns;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) < 0)
        return isn_error(err, err_len, "sched_setattr with a %.0f us slice: %s%s", ns / 1e3, strerror(errno),
                         errno == EINVAL ? " (Linux takes 100 us to 100 ms, since 6.12)" : "");
    /* Kernels before 6.12 take the call and ignore the slice: read it back. */
    if (ns && isn_thread_slice_ns(0) != ns)
        return isn_error(err, err_len, "this kernel keeps its own slice (per-thread slices need Linux 6.12 or later)");
    return 0;
}

uint64_t isn_thread_slice_ns(pid_t tid) {
    struct sched_attr attr;
    if (get_attr(tid, &attr) < 0 || attr.sched_policy != SCHED_NORMAL) return 0;
    return attr.sched_runtime;
}

int isn_set_this_thread_realtime(int priority, char *err, size_t err_len) {
    struct sched_attr attr;
    if (get_attr(0, &attr) < 0) return isn_error(err, err_len, "sched_getattr: %s", strerror(errno));
    attr.size = sizeof attr;
    attr.sched_policy = SCHED_FIFO;
    attr.sched_priority = (uint32_t)priority;
    attr.sched_flags = SCHED_FLAG_RESET_ON_FORK;
    attr.sched_nice = 0;
    attr.sched_runtime = 0;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) < 0) {
        int saved = errno;
        return isn_error(err, err_len, "SCHED_FIFO at priority %d: %s%s", priority, strerror(saved),
                         saved == EPERM ? " (needs CAP_SYS_NICE or RLIMIT_RTPRIO >= the priority; systemd: LimitRTPRIO=)"
                                        : "");
    }
    return 0;
}

int isn_thread_realtime_priority(pid_t tid) {
    struct sched_attr attr;
    if (get_attr(tid, &attr) < 0 || attr.sched_policy != SCHED_FIFO) return 0;
    return (int)attr.sched_priority;
}

int isn_set_this_thread_idle_policy(char *err, size_t err_len) {
    struct sched_attr attr;
    if (get_attr(0, &attr) < 0) return isn_error(err, err_len, "sched_getattr: %s", strerror(errno));
    attr.size = sizeof attr;
    attr.sched_policy = SCHED_IDLE;
    attr.sched_priority = 0;
    attr.sched_flags = SCHED_FLAG_RESET_ON_FORK;
    attr.sched_runtime = 0;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) < 0) return isn_error(err, err_len, "SCHED_IDLE: %s", strerror(errno));
    return 0;
}

bool isn_thread_has_idle_policy(pid_t tid) {
    struct sched_attr attr;
    return get_attr(tid, &attr) == 0 && attr.sched_policy == SCHED_IDLE;
}

int64_t isn_thread_cpu_wait_ns(pid_t tid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    uint64_t on_cpu = 0, waited = 0;
    int fields = fscanf(f, "%" SCNu64 " %" SCNu64, &on_cpu, &waited);
    fclose(f);
    return fields == 2 ? (int64_t)waited : -1;
}
