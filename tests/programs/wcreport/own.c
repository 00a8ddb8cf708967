/* Workload for wcreport's capture test: named functions that compute,
 * fdatasync, sleep and wait on a condition variable; each thread measures
 * the wall time (CLOCK_MONOTONIC) spent in each function and prints, at
 * exit, one line per thread and function: `TID FUNC NS`.
 *
 *   own SECONDS GOFILE JOURNAL   (starts working once GOFILE exists)
 *
 * Build: gcc -O1 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#define NI __attribute__((noinline))
static volatile unsigned long sink;
static volatile int stop;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static unsigned long long t_compute[2], t_journal, t_nap, t_wait;
static int tids[2];

static unsigned long long now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000ULL + t.tv_nsec;
}

NI void compute_chunk(int who)
{
	unsigned long long t0 = now();
	for (unsigned long i = 0; i < 2000000; i++)
		sink += i * i;
	t_compute[who] += now() - t0;
}

NI void write_journal(int fd)
{
	unsigned long long t0 = now();
	char b[4096] = {1};
	(void)!write(fd, b, sizeof b);
	fdatasync(fd);
	t_journal += now() - t0;
}

NI void nap(void)
{
	unsigned long long t0 = now();
	struct timespec t = {0, 10000000};
	nanosleep(&t, 0);
	t_nap += now() - t0;
}

NI void wait_for_work(void)
{
	unsigned long long t0 = now();
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_nsec += 20000000;
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&m);
	pthread_cond_timedwait(&c, &m, &t);
	pthread_mutex_unlock(&m);
	t_wait += now() - t0;
}

NI void *worker(void *a)
{
	(void)a;
	tids[1] = syscall(SYS_gettid);
	while (!stop) {
		wait_for_work();
		compute_chunk(1);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	double secs = atof(argv[1]);
	while (access(argv[2], F_OK) != 0)
		usleep(1000);
	int fd = open(argv[3], O_CREAT | O_WRONLY | O_TRUNC, 0644);
	tids[0] = syscall(SYS_gettid);
	pthread_t th;
	pthread_create(&th, 0, worker, 0);
	unsigned long long end = now() + (unsigned long long)(secs * 1e9);
	while (now() < end) {
		compute_chunk(0);
		write_journal(fd);
		nap();
	}
	stop = 1;
	pthread_join(th, 0);
	printf("%d compute_chunk %llu\n%d write_journal %llu\n%d nap %llu\n", tids[0], t_compute[0], tids[0], t_journal,
	       tids[0], t_nap);
	printf("%d compute_chunk %llu\n%d wait_for_work %llu\n", tids[1], t_compute[1], tids[1], t_wait);
	return 0;
}
