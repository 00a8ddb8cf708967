/* A thread that execs from a multithreaded process (the exec takes the
 * leader's tid: de_thread). The leader waits in pause(); a second thread
 * spins for SPIN ms, prints its tid and its own CPU time (JSON), then
 * execs `sleep 1`. What a profiler must show: that thread's on-CPU time
 * as its clock says (not the rest of the capture), and its time after
 * the exec (sleep's nanosleep) as its own. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long spin_ms = 300;

static unsigned long long ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec * 1000000000ULL + t.tv_nsec;
}

static void *execer(void *arg)
{
	(void)arg;
	unsigned long long end = ns(CLOCK_MONOTONIC) + spin_ms * 1000000ULL;
	volatile unsigned long x = 0;
	while (ns(CLOCK_MONOTONIC) < end)
		x++;
	printf("{\"leader\":%d,\"tid\":%d,\"cpu_ns\":%llu}\n", getpid(), gettid(), ns(CLOCK_THREAD_CPUTIME_ID));
	fflush(stdout);
	execlp("sleep", "sleep", "1", (char *)0);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		spin_ms = atol(argv[1]);
	pthread_t t;
	pthread_create(&t, 0, execer, 0);
	pause();
	return 0;
}
