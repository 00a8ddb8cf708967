/* Ground truth for process-tree captures (tests/tree.rs).
 *   treespin spin MS        burn MS ms of CPU in spin_outer/spin_inner, nap
 *                           10 x 5 ms in nap(), print {"pid","cpu_ns","rusage_ns"}
 *   treespin fork GOFILE MS wait for GOFILE to exist, then fork a worker that
 *                           does `spin MS` (no exec), wait for it
 *   treespin until FILE     burn CPU in spin_outer/spin_inner until FILE exists
 *                           (a process that outlives a capture window however
 *                           slow the machine), then as `spin`
 * Build with -fno-optimize-sibling-calls: every function keeps its frame. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

static long long now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static volatile unsigned long sink;

__attribute__((noinline)) static void spin_inner(void)
{
	for (int i = 0; i < 100000; i++)
		sink = sink * 6364136223846793005UL + i;
}

__attribute__((noinline)) static void spin_outer(long long ms)
{
	long long end = now_ns(CLOCK_PROCESS_CPUTIME_ID) + ms * 1000000LL;
	while (now_ns(CLOCK_PROCESS_CPUTIME_ID) < end)
		spin_inner();
}

__attribute__((noinline)) static void spin_until(const char *stopfile)
{
	while (access(stopfile, F_OK) != 0)
		spin_inner();
}

__attribute__((noinline)) static void nap(void)
{
	struct timespec ts = { 0, 5000000 };
	for (int i = 0; i < 10; i++)
		nanosleep(&ts, NULL);
}

static void report(void);

__attribute__((noinline)) static int spin(long long ms)
{
	spin_outer(ms);
	nap();
	report();
	return 0;
}

__attribute__((noinline)) static int until(const char *stopfile)
{
	spin_until(stopfile);
	nap();
	report();
	return 0;
}

static void report(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	long long ru_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
			  (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
	printf("{\"pid\":%d,\"cpu_ns\":%lld,\"rusage_ns\":%lld}\n", getpid(), now_ns(CLOCK_PROCESS_CPUTIME_ID), ru_ns);
	fflush(stdout);
}

__attribute__((noinline)) static int fork_worker(const char *gofile, long long ms)
{
	while (access(gofile, F_OK) != 0)
		usleep(5000);
	pid_t p = fork();
	if (p == 0)
		_exit(spin(ms));
	int st;
	waitpid(p, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "spin"))
		return spin(atoll(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "until"))
		return until(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "fork"))
		return fork_worker(argv[2], atoll(argv[3]));
	fprintf(stderr, "usage: treespin spin MS | treespin until FILE | treespin fork GOFILE MS\n");
	return 2;
}
