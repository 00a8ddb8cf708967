// Context-switch storm: two threads ping-pong one byte through two pipes
// for SECONDS and print the round trips per second. Pin it to one CPU
// (taskset -c 0) so every hand-off is a context switch.
//
//   storm [SECONDS] [GATE]
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static volatile int stop;

static void *pong(void *arg) {
    (void)arg;
    char c;
    while (read(ab[0], &c, 1) == 1) {
        if (c == 'q') break;
        if (write(ba[1], &c, 1) != 1) break;
    }
    return NULL;
}

// With a GATE argument (a fifo), wait on it before the measured interval: the
// bench attaches a profiler with -p PID while we block in read() on the gate,
// then writes one byte to release us.
static void wait_gate(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { perror(path); exit(1); }
    char g;
    if (read(fd, &g, 1) < 0) { perror(path); exit(1); }
    close(fd);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 5;
    if (pipe(ab) || pipe(ba)) { perror("pipe"); return 1; }
    pthread_t t;
    pthread_create(&t, NULL, pong, NULL);
    if (argc > 2) wait_gate(argv[2]);
    double start = now(), end = start + secs;
    long trips = 0;
    char c = 'p';
    while (1) {
        for (int i = 0; i < 1000; i++) {
            if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) { perror("pipe"); return 1; }
        }
        trips += 1000;
        if (now() >= end) break;
    }
    double el = now() - start;
    c = 'q';
    if (write(ab[1], &c, 1) != 1) return 1;
    pthread_join(t, NULL);
    printf("%.0f\n", trips / el);
    return 0;
}
