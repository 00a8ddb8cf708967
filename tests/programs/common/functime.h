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

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Kept out of line so that each measured function is a frame of its own. */
#define NOINLINE __attribute__((noinline))
#define MAXF 4

/* With functime_log set, every call is kept too (its wall interval, its
 * CPU time and the thread's CPU clock at its start), so that a program
 * attached to in the middle of its run can give its figures for the
 * capture's window alone (fstat_window, thread_cpu_window). */
struct fcall { unsigned long long w0, w1, cpu, c0; };
struct fstat {
	const char *name;
	unsigned long long cpu, wall, calls;
	struct fcall *log;
	unsigned long nlog, cap;
};
static int functime_log;

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

/* Room in s's log for one more call, its memory touched: run by END
 * before its clock reads, so that the copy and the page faults of a
 * growing log are the function's own time, as a profiler sees them (in
 * its frame). Outside the measured interval, each page fault of a
 * thread preempted most of the time (the writer in the arm64 guest, 90%
 * runnable) was a point where it could wait for a CPU in the function's
 * frame but outside its figures. */
static void fstat_reserve(struct fstat *s)
{
	if (!functime_log || s->nlog < s->cap)
		return;
	unsigned long cap = s->cap ? 2 * s->cap : 4096;
	struct fcall *l = realloc(s->log, cap * sizeof(*l));
	if (!l)
		return;
	memset(l + s->cap, 0, (cap - s->cap) * sizeof(*l));
	s->log = l;
	s->cap = cap;
}

/* c0: the thread's CPU clock at the call's start (thread_cpu_window). */
static void fstat_add(struct fstat *s, unsigned long long w0, unsigned long long w1, unsigned long long cpu,
		      unsigned long long c0)
{
	s->cpu += cpu;
	s->wall += w1 - w0;
	s->calls++;
	if (functime_log && s->nlog < s->cap)
		s->log[s->nlog++] = (struct fcall){ w0, w1, cpu, c0 };
}

/* s's wall and CPU time inside [a, b) (CLOCK_MONOTONIC): a call across
 * an edge counts for the part of it inside, its CPU time prorated. */
__attribute__((unused)) static void fstat_window(const struct fstat *s, unsigned long long a, unsigned long long b,
			 unsigned long long *cpu, unsigned long long *wall)
{
	double c = 0, w = 0;
	for (unsigned long i = 0; i < s->nlog; i++) {
		const struct fcall *k = &s->log[i];
		unsigned long long lo = k->w0 > a ? k->w0 : a, hi = k->w1 < b ? k->w1 : b;
		if (hi <= lo || k->w1 <= k->w0)
			continue;
		w += hi - lo;
		c += (double)k->cpu * (hi - lo) / (k->w1 - k->w0);
	}
	*cpu = c;
	*wall = w;
}

/* The CPU time of f[0..nf)'s calls inside [a, b) (fstat_window's, summed). */
static double funcs_cpu_window(const struct fstat *f, int nf, unsigned long long a, unsigned long long b)
{
	double sum = 0;
	for (int j = 0; j < nf; j++) {
		unsigned long long cpu, wall;
		fstat_window(&f[j], a, b, &cpu, &wall);
		sum += cpu;
	}
	return sum;
}

/* The thread's whole CPU clock over [a, b) (CLOCK_MONOTONIC), its loops
 * and clock reads included, which its functions' figures leave out:
 * read from its clock, from the start of its first call inside the
 * window to the end of its last (f[0..nf)'s logs, calls one after the
 * other), plus its functions' figures for the window's edges before and
 * after those (the calls across an edge, prorated). Its functions'
 * figures alone where no call lies wholly inside (a thread in one long
 * call). */
__attribute__((unused)) static unsigned long long thread_cpu_window(const struct fstat *f, int nf, unsigned long long a,
								    unsigned long long b)
{
	const struct fcall *first = NULL, *last = NULL;
	for (int j = 0; j < nf; j++)
		for (unsigned long i = 0; i < f[j].nlog; i++) {
			const struct fcall *k = &f[j].log[i];
			if (k->w0 < a || k->w1 > b)
				continue;
			if (!first || k->w0 < first->w0)
				first = k;
			if (!last || k->w1 > last->w1)
				last = k;
		}
	if (!first)
		return funcs_cpu_window(f, nf, a, b);
	return last->c0 + last->cpu - first->c0 + funcs_cpu_window(f, nf, a, first->w0) +
	       funcs_cpu_window(f, nf, last->w1, b);
}

/* Wall clock first at the start, last at the end: reading the CPU clock
 * is a system call, and a thread is preempted at a system call's exit
 * more than anywhere; read before the wall clock at the start, a thread
 * preempted there (100 ms under two CPU hogs) spent that time in the
 * function's frame but outside its measured interval. */
#define BEGIN unsigned long long w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID)
#define END(t, n) do { struct fstat *s_ = fstat_of((t)->f, &(t)->nf, n); \
	fstat_reserve(s_); \
	unsigned long long c1_ = now(CLOCK_THREAD_CPUTIME_ID); \
	fstat_add(s_, w0, now(CLOCK_MONOTONIC), c1_ - c0, c0); } while (0)
#define TIMED(t, n, body) do { BEGIN; body; END(t, n); } while (0)

#endif
