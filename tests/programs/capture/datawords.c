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
 * Each call of a place is timed by main, on CLOCK_MONOTONIC and on the
 * thread's CPU clock: while it runs, the thread's stack passes through
 * the place, so the wall time less the CPU time is the place's off-CPU
 * time, what the capture must put under stacks through it (the syscall's
 * way in and out is on-CPU: 18-26 us a block on a loaded VM, 2-7 ms of a
 * place's 100 blocks, which a wall clock around the syscall alone gave the
 * block). It prints, as JSON, each place's wall and CPU time (ns).
 * Build without frame pointers (bp is then data, not a frame). */
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

static unsigned long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* The block. */
static NOINLINE unsigned long long nap(void)
{
	struct timespec d = { 0, 2000000 };
	syscall(SYS_nanosleep, &d, NULL);
	return 0;
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
	nap();
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

static volatile unsigned long long sink;

NOINLINE void via_a(void)
{
	sink += shared();
}

NOINLINE void via_b(void)
{
	sink += shared();
}

/* Wall and CPU time of each place's calls. */
static unsigned long long wall[3], cpu[3];
#define TIMED(k, call)                                   \
	do {                                             \
		unsigned long long c0 = cpu_ns(), t0 = mono_ns(); \
		call;                                    \
		wall[k] += mono_ns() - t0;               \
		cpu[k] += cpu_ns() - c0;                 \
	} while (0)

int main(int argc, char **argv)
{
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
	for (unsigned long i = 0; i < n; i++) {
		TIMED(0, counter(i));
		TIMED(1, via_a());
		TIMED(2, via_b());
	}
	printf("{\"counter_ns\": %llu, \"via_a_ns\": %llu, \"via_b_ns\": %llu, "
	       "\"counter_cpu_ns\": %llu, \"via_a_cpu_ns\": %llu, \"via_b_cpu_ns\": %llu, \"blocks\": %lu}\n",
	       wall[0], wall[1], wall[2], cpu[0], cpu[1], cpu[2], n);
	return 0;
}
