/* Blocks whose stacks hold data that changes at every block, for
 * tests/fingerprint.rs: the fingerprint offcputime keys a block's stack by
 * must stay the same for one call path (else each block costs a stack
 * copy) and differ between two (else their time is merged).
 *
 *   datawords N
 *
 * One thread (main) blocks N times 2 ms in nanosleep (the raw syscall, no
 * libc frame between) from each of three places, in turn:
 *   counter   a loop counter and a pointer to a new buffer on its stack,
 *             next to the syscall, new at each block;
 *   via_a     calls shared(), which blocks;
 *   via_b     calls shared() too: the same leaf, at the same stack depth,
 *             with the same words on top of the stack (shared's frame),
 *             only the return address into via_a or via_b apart.
 * It prints each place's blocked time by its own CLOCK_MONOTONIC (ns) as
 * JSON. Build without frame pointers (bp is then data, not a frame). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static unsigned long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static unsigned long long t_counter, t_a, t_b;

/* The block, timed. */
static NOINLINE unsigned long long nap(void)
{
	struct timespec d = { 0, 2000000 };
	unsigned long long t0 = mono_ns();
	syscall(SYS_nanosleep, &d, NULL);
	return mono_ns() - t0;
}

NOINLINE void counter(unsigned long i)
{
	/* On the stack beside the call: a counter and a heap pointer. */
	volatile unsigned long words[4];
	char *buf = malloc(64 + (i % 7) * 4096);
	words[0] = i;
	words[1] = (unsigned long)buf;
	words[2] = i * 2654435761UL;
	words[3] = (unsigned long)mono_ns();
	t_counter += nap();
	free((void *)words[1]);
}

/* The same for both callers: a frame of constant words above nap's. */
NOINLINE unsigned long long shared(void)
{
	volatile unsigned long pad[8];
	for (int k = 0; k < 8; k++)
		pad[k] = 0x1000 + k;
	unsigned long long t = nap();
	return t + pad[0] - 0x1000;
}

NOINLINE void via_a(void)
{
	t_a += shared();
}

NOINLINE void via_b(void)
{
	t_b += shared();
}

int main(int argc, char **argv)
{
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
	for (unsigned long i = 0; i < n; i++) {
		counter(i);
		via_a();
		via_b();
	}
	printf("{\"counter_ns\": %llu, \"via_a_ns\": %llu, \"via_b_ns\": %llu, \"blocks\": %lu}\n", t_counter, t_a, t_b, n);
	return 0;
}
