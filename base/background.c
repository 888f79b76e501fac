/* Background work beside the threads that serve (base.h: isn_lower_this_thread, isn_run_lowered). */
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"

/* The lowest nice value, for where SCHED_IDLE is refused. */
#define BACKGROUND_NICE 19

/* SCHED_IDLE rather than nice 19 alone: the kernel lets a woken thread of the normal policy preempt an
 * idle-policy one at once, while a nice-19 thread, once picked, may keep its core for the rest of its
 * slice (milliseconds under EEVDF's run-to-parity), and a loop, worker or GPU dispatcher that wakes
 * behind it waits that long. On a saturated node the work still progresses, at a smaller share. */
void isn_lower_this_thread(void) {
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), BACKGROUND_NICE);
    struct sched_param none = {.sched_priority = 0};
    /* refused (a seccomp filter, say): nice 19 alone */
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
}

typedef struct {
    void (*work)(void *);
    void *arg;
} lowered_job;

static void *run_job(void *arg) {
    lowered_job *job = arg;
    isn_lower_this_thread();
    job->work(job->arg);
    return NULL;
}

void isn_run_lowered(void (*work)(void *), void *arg) {
    lowered_job job = {work, arg};
    pthread_t thread;
    if (pthread_create(&thread, NULL, run_job, &job) == 0) {
        pthread_join(thread, NULL);
        return;
    }
    work(arg); /* no thread to be had: on the caller's, at its own priority */
}
