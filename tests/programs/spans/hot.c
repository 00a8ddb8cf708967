/* The cost of a probe: `hot N` calls tick() N times back to back and
 * prints the mean ns per call (CLOCK_MONOTONIC around the loop):
 *   ns_per_call X
 * scripts/bench probes runs it bare and under offcputime --probe. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

void __attribute__((noinline)) tick(int i)
{
	sink += (unsigned long)i * 2654435761u;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		tick((int)i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	printf("ns_per_call %.1f\n", ns / n);
	return 0;
}
