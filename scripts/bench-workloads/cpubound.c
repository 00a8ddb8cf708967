// CPU-bound: one thread spins for SECONDS and prints iterations per second.
//
//   cpubound [SECONDS] [GATE]
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

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

__attribute__((noinline)) static uint64_t work(uint64_t x) {
    for (int i = 0; i < 100000; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 5;
    if (argc > 2) wait_gate(argv[2]);
    double start = now(), end = start + secs;
    uint64_t x = 1, iters = 0;
    while (now() < end) { x = work(x); iters++; }
    printf("%.0f\n", iters / (now() - start) + (double)(x & 0));
    return 0;
}
