/* Ground-truth workload for the waker tests: pairs of threads where one
 * ends the other's waits, each in a function of its own, and a sleeper
 * woken by a timer. Each thread measures its wall and CPU time per
 * function; at exit one JSON line per thread: name, tid, functions.
 *
 *   wakers SECONDS DIR   (DIR: where the worker writes and fdatasyncs)
 *
 * Pairs (waiter function <- waker function):
 *   consume_wait   <- produce_signal   condition variable
 *   wait_lock      <- release_lock     mutex
 *   pipe_read_wait <- pipe_write       pipe
 *   timer_sleep    <- [timer]          nanosleep
 *   wait_for_worker <- worker_signal, whose thread last waited in
 *                      worker_sync (fdatasync): a chain of two hops
 *
 * Build: gcc -O1 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../common/functime.h"

struct thr { const char *name; pthread_t th; int tid; struct fstat f[MAXF]; int nf; void *(*fn)(void *); };

static volatile int stop;
static const char *dir = ".";
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready;
static pthread_mutex_t lmu = PTHREAD_MUTEX_INITIALIZER;
static int pfd[2];
static pthread_mutex_t wmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wcv = PTHREAD_COND_INITIALIZER;
static int done_round;
static volatile unsigned long sink;

static NOINLINE void spin_us(long us)
{
	unsigned long long end = now(CLOCK_THREAD_CPUTIME_ID) + us * 1000ULL;
	while (now(CLOCK_THREAD_CPUTIME_ID) < end)
		sink++;
}

static NOINLINE void nap_us(long us)
{
	struct timespec ts = { 0, us * 1000L };
	nanosleep(&ts, 0);
}

/* condition variable */
static NOINLINE void produce_signal(void)
{
	pthread_mutex_lock(&cmu);
	ready = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&cmu);
}

static void *producer(void *a)
{
	struct thr *t = a;
	while (!stop) {
		TIMED(t, "produce_work", spin_us(300));
		TIMED(t, "produce_signal", produce_signal());
		TIMED(t, "produce_rest", nap_us(700));
	}
	TIMED(t, "produce_signal", produce_signal());
	return 0;
}

static NOINLINE void consume_wait(void)
{
	pthread_mutex_lock(&cmu);
	while (!ready && !stop)
		pthread_cond_wait(&cv, &cmu);
	ready = 0;
	pthread_mutex_unlock(&cmu);
}

static void *consumer(void *a)
{
	struct thr *t = a;
	while (!stop)
		TIMED(t, "consume_wait", consume_wait());
	return 0;
}

/* mutex */
static NOINLINE void release_lock(void)
{
	pthread_mutex_unlock(&lmu);
}

static void *holder(void *a)
{
	struct thr *t = a;
	while (!stop) {
		pthread_mutex_lock(&lmu);
		TIMED(t, "hold_lock", spin_us(800));
		TIMED(t, "release_lock", release_lock());
		TIMED(t, "hold_rest", nap_us(400));
	}
	return 0;
}

static NOINLINE void wait_lock(void)
{
	pthread_mutex_lock(&lmu);
	pthread_mutex_unlock(&lmu);
}

static void *locker(void *a)
{
	struct thr *t = a;
	while (!stop) {
		TIMED(t, "wait_lock", wait_lock());
		TIMED(t, "lock_rest", nap_us(200));
	}
	return 0;
}

/* pipe */
static NOINLINE void pipe_write(void)
{
	char c = 'x';
	if (write(pfd[1], &c, 1) != 1)
		abort();
}

static void *writer(void *a)
{
	struct thr *t = a;
	while (!stop) {
		TIMED(t, "write_rest", nap_us(1000));
		TIMED(t, "pipe_write", pipe_write());
	}
	TIMED(t, "pipe_write", pipe_write());
	return 0;
}

static NOINLINE void pipe_read_wait(void)
{
	char c;
	if (read(pfd[0], &c, 1) != 1)
		abort();
}

static void *reader(void *a)
{
	struct thr *t = a;
	while (!stop)
		TIMED(t, "pipe_read_wait", pipe_read_wait());
	return 0;
}

/* timer */
static NOINLINE void timer_sleep(void)
{
	struct timespec ts = { 0, 3000000 };
	nanosleep(&ts, 0);
}

static void *sleeper(void *a)
{
	struct thr *t = a;
	while (!stop)
		TIMED(t, "timer_sleep", timer_sleep());
	return 0;
}

/* chain: A waits on the worker, the worker waits on the disk */
static NOINLINE void worker_sync(int fd)
{
	char buf[4096];
	memset(buf, 'w', sizeof(buf));
	if (pwrite(fd, buf, sizeof(buf), 0) != sizeof(buf))
		abort();
	fdatasync(fd);
}

static NOINLINE void worker_signal(void)
{
	pthread_mutex_lock(&wmu);
	done_round++;
	pthread_cond_signal(&wcv);
	pthread_mutex_unlock(&wmu);
}

static void *worker(void *a)
{
	struct thr *t = a;
	char path[4096];
	snprintf(path, sizeof(path), "%s/wakers-sync.dat", dir);
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	if (fd < 0)
		abort();
	while (!stop) {
		TIMED(t, "worker_sync", worker_sync(fd));
		TIMED(t, "worker_signal", worker_signal());
	}
	TIMED(t, "worker_signal", worker_signal());
	close(fd);
	unlink(path);
	return 0;
}

static NOINLINE void wait_for_worker(int *seen)
{
	pthread_mutex_lock(&wmu);
	while (done_round == *seen && !stop)
		pthread_cond_wait(&wcv, &wmu);
	*seen = done_round;
	pthread_mutex_unlock(&wmu);
}

static void *requester(void *a)
{
	struct thr *t = a;
	int seen = 0;
	while (!stop)
		TIMED(t, "wait_for_worker", wait_for_worker(&seen));
	return 0;
}

static void *start(void *a)
{
	struct thr *t = a;
	t->tid = syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), t->name);
	return t->fn(a);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	if (argc > 2)
		dir = argv[2];
	if (pipe(pfd))
		return 1;
	struct thr t[] = {
		{ .name = "producer", .fn = producer }, { .name = "consumer", .fn = consumer },
		{ .name = "holder", .fn = holder },     { .name = "locker", .fn = locker },
		{ .name = "writer", .fn = writer },     { .name = "reader", .fn = reader },
		{ .name = "sleeper", .fn = sleeper },   { .name = "worker", .fn = worker },
		{ .name = "requester", .fn = requester },
	};
	int n = sizeof(t) / sizeof(t[0]);
	for (int i = 0; i < n; i++)
		pthread_create(&t[i].th, 0, start, &t[i]);
	nap_us((long)(secs * 1e6) % 1000000);
	for (int s = 0; s < (int)secs; s++)
		nap_us(999999);
	/* Each waker wakes its waiter once more after its loop (the waiter
	 * then sees stop): main wakes nobody, so that every wait of a waiter
	 * has its one right waker, the last one too. */
	stop = 1;
	for (int i = 0; i < n; i++)
		pthread_join(t[i].th, 0);
	for (int i = 0; i < n; i++) {
		printf("{\"name\":\"%s\",\"tid\":%d,\"funcs\":{", t[i].name, t[i].tid);
		for (int j = 0; j < t[i].nf; j++)
			printf("%s\"%s\":{\"wall\":%llu,\"cpu\":%llu}", j ? "," : "", t[i].f[j].name, t[i].f[j].wall, t[i].f[j].cpu);
		printf("}}\n");
	}
	return 0;
}
