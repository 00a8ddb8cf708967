// wallclock demo workload: six threads that spend their time in known
// ways and print, at exit, how long each named function ran on the CPU
// (CLOCK_THREAD_CPUTIME_ID) and in wall time (CLOCK_MONOTONIC).
//
//   main        compute_chunk() and nap() (nanosleep), alternating
//   demo-io     write_and_fsync(): 256 KiB writes, each followed by fdatasync
//   demo-lock1  locked_update() under a mutex held 4 ms at a time,
//   demo-lock2    so each waits in pthread_mutex_lock for the other
//   demo-prod   pace(): hands an item over after each 150 us nanosleep
//   demo-cons   wait_for_item() on a condition variable, handle_item() (60 us)
// The last two block thousands of times for well under a millisecond each:
// the waits real servers are made of.
//
// Usage: workload [SECONDS] [SCRATCH_FILE]     (defaults: 10, /tmp/wallclock-demo.dat)
// Built by scripts/demo with -fno-omit-frame-pointer -g.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

enum { F_COMPUTE, F_NAP, F_WRITE, F_LOCKED, F_WAIT_LOCK, F_PACE, F_WAIT_ITEM, F_HANDLE, NFUNC };
static const char *fname[NFUNC] = {"compute_chunk", "nap",  "write_and_fsync", "locked_update",
                                   "lock_wait",     "pace", "wait_for_item",   "handle_item"};

struct truth {
    const char *thread;
    pid_t tid;
    int64_t cpu_ns[NFUNC], wall_ns[NFUNC];
};

static double g_seconds = 10;
static const char *g_file = "/tmp/wallclock-demo.dat";
static int64_t g_deadline;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t g_sink;
static pthread_mutex_t g_qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_qcond = PTHREAD_COND_INITIALIZER;
static int g_items, g_done;

static int64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Measures one call of a named function into the thread's truth.
#define MEASURE(t, f, call)                                      \
    do {                                                         \
        int64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);            \
        int64_t w0 = now_ns(CLOCK_MONOTONIC);                    \
        call;                                                    \
        (t)->cpu_ns[f] += now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;  \
        (t)->wall_ns[f] += now_ns(CLOCK_MONOTONIC) - w0;         \
    } while (0)

__attribute__((noinline)) static void spin_ns(int64_t ns) {
    int64_t end = now_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
    uint64_t x = 1;
    while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
        for (int i = 0; i < 1000; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    g_sink += x;
}

__attribute__((noinline)) void compute_chunk(void) { spin_ns(30 * 1000000); }

__attribute__((noinline)) void nap(void) {
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) void write_and_fsync(int fd, const char *buf, size_t len) {
    if (write(fd, buf, len) != (ssize_t)len) perror("write");
    fdatasync(fd);
}

__attribute__((noinline)) void locked_update(struct truth *t) {
    MEASURE(t, F_WAIT_LOCK, pthread_mutex_lock(&g_lock));
    spin_ns(4 * 1000000);
    pthread_mutex_unlock(&g_lock);
}

// Returns 0 once the producer is done and nothing is left.
__attribute__((noinline)) int wait_for_item(void) {
    pthread_mutex_lock(&g_qlock);
    while (!g_items && !g_done) pthread_cond_wait(&g_qcond, &g_qlock);
    int got = g_items > 0;
    if (got) g_items--;
    pthread_mutex_unlock(&g_qlock);
    return got;
}

__attribute__((noinline)) void handle_item(void) { spin_ns(60 * 1000); }

__attribute__((noinline)) static void post_item(int last) {
    pthread_mutex_lock(&g_qlock);
    g_items++;
    g_done |= last;
    pthread_cond_signal(&g_qcond);
    pthread_mutex_unlock(&g_qlock);
}

// 16 hand-overs, each after a 150 us nanosleep (measured as one call: a
// call of a few microseconds of CPU would be mostly clock reads).
__attribute__((noinline)) void pace(void) {
    for (int i = 0; i < 16; i++) {
        struct timespec ts = {0, 150 * 1000};
        nanosleep(&ts, NULL);
        post_item(0);
    }
}

static void *producer_thread(void *arg) {
    struct truth *t = arg;
    t->tid = (pid_t)syscall(SYS_gettid);
    // No timer slack: with the default 50 us, the kernel expires this
    // nanosleep together with the sampling timer whenever that fires in
    // the slack window, so the thread always runs just after a sample and
    // never under one, and its few microseconds of CPU per wake-up would be
    // sampled as zero (a bias of every timer-sampled profiler, perf's too).
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    while (now_ns(CLOCK_MONOTONIC) < g_deadline)
        MEASURE(t, F_PACE, pace());
    post_item(1);
    return NULL;
}

static void *consumer_thread(void *arg) {
    struct truth *t = arg;
    t->tid = (pid_t)syscall(SYS_gettid);
    for (;;) {
        int got;
        MEASURE(t, F_WAIT_ITEM, got = wait_for_item());
        if (!got) break;
        MEASURE(t, F_HANDLE, handle_item());
    }
    return NULL;
}

static void *io_thread(void *arg) {
    struct truth *t = arg;
    t->tid = (pid_t)syscall(SYS_gettid);
    int fd = open(g_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) { perror(g_file); return NULL; }
    static char buf[256 * 1024];
    memset(buf, 'w', sizeof buf);
    while (now_ns(CLOCK_MONOTONIC) < g_deadline) {
        if (lseek(fd, 0, SEEK_END) > 64 << 20) (void)!ftruncate(fd, 0);
        MEASURE(t, F_WRITE, write_and_fsync(fd, buf, sizeof buf));
    }
    close(fd);
    unlink(g_file);
    return NULL;
}

static void *lock_thread(void *arg) {
    struct truth *t = arg;
    t->tid = (pid_t)syscall(SYS_gettid);
    while (now_ns(CLOCK_MONOTONIC) < g_deadline)
        MEASURE(t, F_LOCKED, locked_update(t));
    return NULL;
}

static void print_truth(struct truth *ts, int n) {
    printf("{\"pid\":%d,\"threads\":[", (int)getpid());
    for (int i = 0; i < n; i++) {
        printf("%s{\"thread\":\"%s\",\"tid\":%d,\"functions\":{", i ? "," : "", ts[i].thread, (int)ts[i].tid);
        int first = 1;
        for (int f = 0; f < NFUNC; f++) {
            if (!ts[i].wall_ns[f]) continue;
            printf("%s\"%s\":{\"cpu_ns\":%lld,\"wall_ns\":%lld}", first ? "" : ",", fname[f],
                   (long long)ts[i].cpu_ns[f], (long long)ts[i].wall_ns[f]);
            first = 0;
        }
        printf("}}");
    }
    printf("]}\n");
}

int main(int argc, char **argv) {
    if (argc > 1) g_seconds = atof(argv[1]);
    if (argc > 2) g_file = argv[2];
    if (g_seconds <= 0) { fprintf(stderr, "usage: %s [SECONDS] [SCRATCH_FILE]\n", argv[0]); return 2; }
    g_deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)(g_seconds * 1e9);

    static struct truth ts[6] = {{.thread = "main"},       {.thread = "demo-io"},   {.thread = "demo-lock1"},
                                 {.thread = "demo-lock2"}, {.thread = "demo-prod"}, {.thread = "demo-cons"}};
    ts[0].tid = getpid();
    pthread_t th[5];
    void *(*fn[5])(void *) = {io_thread, lock_thread, lock_thread, producer_thread, consumer_thread};
    for (int i = 0; i < 5; i++) {
        pthread_create(&th[i], NULL, fn[i], &ts[i + 1]);
        pthread_setname_np(th[i], ts[i + 1].thread);
    }

    while (now_ns(CLOCK_MONOTONIC) < g_deadline) {
        MEASURE(&ts[0], F_COMPUTE, compute_chunk());
        MEASURE(&ts[0], F_NAP, nap());
    }
    for (int i = 0; i < 5; i++) pthread_join(th[i], NULL);
    print_truth(ts, 6);
    return 0;
}
