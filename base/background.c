/* Background work beside the threads that serve (base.h: isn_lower_this_thread, isn_run_lowered). */
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"

/* The lowest priority Linux gives a thread. */
#define BACKGROUND_NICE 19

void isn_lower_this_thread(void) {
    /* refused (a seccomp filter, say): the work runs at the thread's own priority */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), BACKGROUND_NICE);
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
