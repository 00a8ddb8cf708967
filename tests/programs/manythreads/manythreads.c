/* A process with many threads, most of them blocked, a few working: the
 * shape of a service with a big thread pool (tests/manythreads.rs).
 *
 *   manythreads THREADS SECONDS
 *
 * Prints "ready PID" on stdout once every thread has started, then runs
 * for SECONDS. Thread i, by i % 10:
 *   0-2  sleeper: nanosleep loop, period 2-98 ms (by i)
 *   3-5  waiter:  condition-variable timed wait, period 3-91 ms
 *   6-8  juggler: alternates two blocking calls (two stacks per thread)
 *   9    parked:  waits on a condition never signalled (blocked throughout)
 *        or, for every other one, dozer: sleeps 1-4 s at a time
 * and the first WORKERS threads instead spin 2 ms, sleep 1 ms.
 *
 * Build: gcc -O1 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define WORKERS 4

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_cond_t tick = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t start_cv = PTHREAD_COND_INITIALIZER;
static int started;
static volatile unsigned long sink;

static unsigned long long now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

NOINLINE void spin_work(void)
{
	unsigned long long e = now_ns(CLOCK_THREAD_CPUTIME_ID) + 2000000;
	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < e)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

NOINLINE void worker_rest(void) { sleep_ms(1); }
NOINLINE void sleeper_wait(long ms) { sleep_ms(ms); }

NOINLINE void waiter_wait(long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000000;
	while (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
	pthread_mutex_lock(&mu);
	pthread_cond_timedwait(&tick, &mu, &ts);
	pthread_mutex_unlock(&mu);
}

NOINLINE void juggler_poll(long ms) { poll(NULL, 0, (int)ms); }
NOINLINE void juggler_sleep(long ms) { sleep_ms(ms); }

NOINLINE void dozer_sleep(long ms) { sleep_ms(ms); }

NOINLINE void parked_wait(void)
{
	pthread_mutex_lock(&mu);
	for (;;)
		pthread_cond_wait(&never, &mu);
}

static void *run(void *arg)
{
	long i = (long)arg;
	pthread_mutex_lock(&start_mu);
	started++;
	pthread_cond_signal(&start_cv);
	pthread_mutex_unlock(&start_mu);
	if (i < WORKERS) {
		for (;;) {
			spin_work();
			worker_rest();
		}
	}
	switch (i % 10) {
	case 0: case 1: case 2:
		for (;;)
			sleeper_wait(2 + i % 97);
	case 3: case 4: case 5:
		for (;;)
			waiter_wait(3 + i % 89);
	case 6: case 7: case 8:
		for (;;) {
			juggler_poll(1 + i % 43);
			juggler_sleep(1 + i % 31);
		}
	default:
		if (i % 20 == 19)
			for (;;)
				dozer_sleep(1000 + i % 7 * 500);
		parked_wait();
	}
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000;
	double seconds = argc > 2 ? atof(argv[2]) : 10;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 128 << 10);
	for (long i = 0; i < n; i++) {
		pthread_t t;
		int e = pthread_create(&t, &attr, run, (void *)i);
		if (e) {
			fprintf(stderr, "manythreads: thread %ld: %s\n", i, strerror(e));
			return 1;
		}
	}
	pthread_mutex_lock(&start_mu);
	while (started < n)
		pthread_cond_wait(&start_cv, &start_mu);
	pthread_mutex_unlock(&start_mu);
	printf("ready %d\n", getpid());
	fflush(stdout);
	sleep_ms((long)(seconds * 1000));
	return 0;
}
