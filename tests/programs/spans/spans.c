/* Ground truth for spans: handle(int id) is called N times by the main
 * thread and takes one of four known mixes by id % 4:
 *   0: spins ~1 ms (on-CPU);
 *   1: spins ~2 ms, then sleeps 10 ms (the slow calls: ~12 ms);
 *   2: waits ~5 ms on a mutex another thread holds;
 *   3: spins ~0.2 ms.
 * It prints one line per call with its own wall and CPU time, measured
 * inside handle (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID):
 *   call ID KIND WALL_NS CPU_NS
 * Usage: spans [N] (default 80). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int want_hold, held, done;

static long long now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void __attribute__((noinline)) spin(long long ns)
{
	long long end = now_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		;
}

static void __attribute__((noinline)) nap(long long ns)
{
	struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };
	nanosleep(&ts, NULL);
}

/* Holds `lock` for 5 ms each time the main thread asks. */
static void *holder(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&m);
	for (;;) {
		while (!want_hold && !done)
			pthread_cond_wait(&cv, &m);
		if (done)
			break;
		want_hold = 0;
		pthread_mutex_lock(&lock);
		held = 1;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&m);
		nap(5000000);
		pthread_mutex_unlock(&lock);
		pthread_mutex_lock(&m);
	}
	pthread_mutex_unlock(&m);
	return NULL;
}

static void __attribute__((noinline)) wait_lock(void)
{
	pthread_mutex_lock(&lock);
	pthread_mutex_unlock(&lock);
}

static const char *kinds[] = { "spin", "slow", "mutex", "short" };

int __attribute__((noinline)) handle(int id)
{
	long long w0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	switch (id % 4) {
	case 0: spin(1000000); break;
	case 1: spin(2000000); nap(10000000); break;
	case 2: wait_lock(); break;
	default: spin(200000); break;
	}
	long long w1 = now_ns(CLOCK_MONOTONIC), c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	printf("call %d %s %lld %lld\n", id, kinds[id % 4], w1 - w0, c1 - c0);
	return id % 4;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 80;
	pthread_t t;
	pthread_create(&t, NULL, holder, NULL);
	for (int i = 0; i < n; i++) {
		if (i % 4 == 2) {
			/* The holder takes the lock first, then handle waits on it. */
			pthread_mutex_lock(&m);
			want_hold = 1;
			held = 0;
			pthread_cond_broadcast(&cv);
			while (!held)
				pthread_cond_wait(&cv, &m);
			pthread_mutex_unlock(&m);
		}
		handle(i);
	}
	pthread_mutex_lock(&m);
	done = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&m);
	pthread_join(t, NULL);
	return 0;
}
