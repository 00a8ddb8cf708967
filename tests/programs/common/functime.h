/* The per-function timing that the ground-truth programs share (capture's
 * workload.c, wakers.c): each thread measures its own CPU time
 * (CLOCK_THREAD_CPUTIME_ID) and wall time (CLOCK_MONOTONIC) per named
 * function, to be compared with what the profiler saw.
 *
 *   BEGIN; ...; END(t, "name");      a function's body, timed
 *   TIMED(t, "name", call());        one call, timed
 *
 * `t` points at a thread's record: any struct with `struct fstat f[MAXF]`
 * and `int nf`. Functions are found by name, at most MAXF per thread.
 * Included after the system headers (the programs define _GNU_SOURCE). */
#ifndef FUNCTIME_H
#define FUNCTIME_H

#include <string.h>
#include <time.h>

/* Kept out of line so that each measured function is a frame of its own. */
#define NOINLINE __attribute__((noinline))
#define MAXF 4

struct fstat { const char *name; unsigned long long cpu, wall, calls; };

static unsigned long long now(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* `name`'s entry in f[0..*nf), added if new. */
static struct fstat *fstat_of(struct fstat *f, int *nf, const char *name)
{
	for (int i = 0; i < *nf; i++)
		if (!strcmp(f[i].name, name))
			return &f[i];
	f[*nf].name = name;
	return &f[(*nf)++];
}

#define BEGIN unsigned long long c0 = now(CLOCK_THREAD_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC)
#define END(t, n) do { struct fstat *s_ = fstat_of((t)->f, &(t)->nf, n); \
	s_->cpu += now(CLOCK_THREAD_CPUTIME_ID) - c0; s_->wall += now(CLOCK_MONOTONIC) - w0; s_->calls++; } while (0)
#define TIMED(t, n, body) do { BEGIN; body; END(t, n); } while (0)

#endif
