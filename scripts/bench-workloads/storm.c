// Context-switch storm: two threads ping-pong one byte through two pipes
// for SECONDS and print the round trips per second. Pin it to one CPU
// (taskset -c 0) so every hand-off is a context switch.
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
