// CPU-bound: one thread spins for SECONDS and prints iterations per second.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>

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
    double start = now(), end = start + secs;
    uint64_t x = 1, iters = 0;
    while (now() < end) { x = work(x); iters++; }
    printf("%.0f\n", iters / (now() - start) + (double)(x & 0));
    return 0;
}
