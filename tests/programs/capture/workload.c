/* Ground-truth workload for the capture tests: each thread measures its own
 * CPU time (CLOCK_THREAD_CPUTIME_ID) and wall time (CLOCK_MONOTONIC) in each
 * named function and prints it all as one JSON object at exit.
 *
 *   workload SECONDS [DIR [WINDOWS]]    (DIR: where disk_write_fsync writes)
 *
 * WINDOWS: a file read at exit, one window a line ("START_NS END_NS",
 * CLOCK_MONOTONIC): the figures are also given for each window alone
 * ("windows"), for a capture attached in the middle of the run. The file
 * is waited for (up to a minute) if it is not there yet; with it, the
 * run ends when it appears (SECONDS is then the longest).
 *
 * Build: gcc -O1 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread workload.c -o workload
 * (without -fno-optimize-sibling-calls a function's last call becomes a
 * jump and the function leaves every stack of the frame-pointer unwinder). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../common/functime.h"

struct thr {
	const char *name;
	pthread_t th;
	int tid;
	unsigned long long start, end;
	struct fstat f[MAXF];
	int nf;
};

static volatile int stop;
static double seconds;
static const char *dir = ".";
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t smu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t scv = PTHREAD_COND_INITIALIZER;
static volatile unsigned long sink;

static void burn(unsigned long long ns)
{
	unsigned long long e = now(CLOCK_THREAD_CPUTIME_ID) + ns;
	while (now(CLOCK_THREAD_CPUTIME_ID) < e)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

NOINLINE void compute(struct thr *t) { BEGIN; burn(6000000); END(t, "compute"); }

NOINLINE void nap(struct thr *t)
{
	BEGIN;
	struct timespec ts = { 0, 9000000 };
	nanosleep(&ts, NULL);
	END(t, "nap");
}

NOINLINE void wait_cond(struct thr *t)
{
	BEGIN;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 20000000;
	if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
	pthread_mutex_lock(&cmu);
	pthread_cond_timedwait(&cv, &cmu, &ts);
	pthread_mutex_unlock(&cmu);
	END(t, "wait_cond");
}

NOINLINE void long_sleep(struct thr *t)
{
	BEGIN;
	struct timespec ts = { (time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9) };
	while (nanosleep(&ts, &ts) && errno == EINTR && !stop)
		;
	END(t, "long_sleep");
}

NOINLINE void spin(struct thr *t) { BEGIN; burn(2000000); END(t, "spin"); }

NOINLINE void disk_write_fsync(struct thr *t, int fd)
{
	BEGIN;
	static char buf[65536];
	memset(buf, t->nf, sizeof buf);
	if (write(fd, buf, sizeof buf) < 0 || fdatasync(fd) < 0)
		perror("write");
	/* Back to the start past 8 MiB, inside the timed body: every
	 * system call of the writer's loop is in its function's figures.
	 * Outside, on the arm64 guest's tmpfs, one lseek a call was 2
	 * points of the thread's time, in no function. */
	if (lseek(fd, 0, SEEK_CUR) > (8 << 20))
		lseek(fd, 0, SEEK_SET);
	END(t, "disk_write_fsync");
}

/* Sub-millisecond waits (150 µs timeouts, ~200 µs with the timer slack):
 * the kind of block a server spends most of its waiting in. Eight per
 * measured call: one wait costs a few microseconds of CPU, about what the
 * clock reads measuring it cost, and the truth would be mostly those. */
NOINLINE void short_wait(struct thr *t)
{
	BEGIN;
	for (int i = 0; i < 8; i++) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 150000;
		if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
		pthread_mutex_lock(&smu);
		pthread_cond_timedwait(&scv, &smu, &ts);
		pthread_mutex_unlock(&smu);
	}
	END(t, "short_wait");
}

NOINLINE void short_work(struct thr *t) { BEGIN; burn(100000); END(t, "short_work"); }

NOINLINE void mutex_section(struct thr *t)
{
	BEGIN;
	pthread_mutex_lock(&mu);
	burn(3000000);
	pthread_mutex_unlock(&mu);
	END(t, "mutex_section");
}

static void *mixer(void *a) { struct thr *t = a; while (!stop) { compute(t); nap(t); } return 0; }
static void *waiter(void *a) { struct thr *t = a; while (!stop) wait_cond(t); return 0; }
static void *sleeper(void *a) { long_sleep(a); return 0; }
static void *locker(void *a) { struct thr *t = a; while (!stop) mutex_section(t); return 0; }
/* Real-time priority (when allowed: the capture tests run as root) so that
 * its waits stay sub-millisecond on a loaded machine: a woken thread of
 * normal priority can wait longer for the CPU than it slept. */
static void *shorty(void *a)
{
	struct thr *t = a;
	struct sched_param sp = { .sched_priority = 1 };
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	while (!stop) {
		short_wait(t);
		short_work(t);
	}
	return 0;
}

static void *spinner(void *a)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	pthread_setaffinity_np(pthread_self(), sizeof set, &set);
	struct thr *t = a;
	while (!stop)
		spin(t);
	return 0;
}

static void *writer(void *a)
{
	struct thr *t = a;
	char path[4096];
	snprintf(path, sizeof path, "%s/workload-fsync.%d", dir, getpid());
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	if (fd < 0) { perror(path); return 0; }
	while (!stop) {
		disk_write_fsync(t, fd);
	}
	close(fd);
	unlink(path);
	return 0;
}

struct thr threads[] = {
	{ .name = "mixer" }, { .name = "waiter" }, { .name = "sleeper" }, { .name = "spin1" },
	{ .name = "spin2" }, { .name = "writer" }, { .name = "lock1" }, { .name = "lock2" },
	{ .name = "shorty" },
};
static void *(*fns[])(void *) = { mixer, waiter, sleeper, spinner, spinner, writer, locker, locker, shorty };
#define N (int)(sizeof threads / sizeof threads[0])

static void *start(void *a)
{
	struct thr *t = a;
	t->tid = syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), t->name);
	t->start = now(CLOCK_MONOTONIC);
	int i = t - threads;
	fns[i](t);
	t->end = now(CLOCK_MONOTONIC);
	return 0;
}

static void wake(int sig) { (void)sig; }

/* "windows":[{"start_ns":..,"end_ns":..,"threads":[{"name","tid","cpu_ns","funcs"}]}]
 * (cpu_ns: the thread's whole CPU clock over the window, thread_cpu_window) */
static void print_windows(const char *path)
{
	FILE *f = NULL;
	for (int i = 0; i < 600 && !(f = fopen(path, "r")); i++)
		usleep(100000);
	printf(",\"windows\":[");
	unsigned long long a, b;
	for (int w = 0; f && fscanf(f, "%llu %llu", &a, &b) == 2; w++) {
		printf("%s{\"start_ns\":%llu,\"end_ns\":%llu,\"threads\":[", w ? "," : "", a, b);
		for (int i = 0; i < N; i++) {
			struct thr *t = &threads[i];
			printf("%s{\"name\":\"%s\",\"tid\":%d,\"cpu_ns\":%llu,\"funcs\":{", i ? "," : "", t->name, t->tid,
			       thread_cpu_window(t->f, t->nf, a, b));
			for (int j = 0; j < t->nf; j++) {
				unsigned long long cpu, wall;
				fstat_window(&t->f[j], a, b, &cpu, &wall);
				printf("%s\"%s\":{\"cpu_ns\":%llu,\"wall_ns\":%llu}", j ? "," : "", t->f[j].name, cpu, wall);
			}
			printf("}}");
		}
		printf("]}");
	}
	printf("]");
	if (f)
		fclose(f);
}

int main(int argc, char **argv)
{
	seconds = argc > 1 ? atof(argv[1]) : 3;
	if (argc > 2)
		dir = argv[2];
	const char *windows = argc > 3 ? argv[3] : NULL;
	functime_log = windows != NULL;
	signal(SIGUSR1, wake);
	unsigned long long t0 = now(CLOCK_MONOTONIC);
	for (int i = 0; i < N; i++)
		pthread_create(&threads[i].th, 0, start, &threads[i]);
	struct timespec ts = { (time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9) };
	if (windows) {
		/* Until the windows are known (the captures are over: a loaded
		 * machine can take seconds to attach them), at most SECONDS. */
		unsigned long long end = t0 + (unsigned long long)(seconds * 1e9);
		while (now(CLOCK_MONOTONIC) < end && access(windows, R_OK))
			usleep(50000);
	} else {
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	stop = 1;
	for (int i = 0; i < N; i++) {
		if (fns[i] == sleeper)
			pthread_kill(threads[i].th, SIGUSR1); /* its sleep ends early too */
		pthread_join(threads[i].th, 0);
	}
	printf("{\"pid\":%d,\"start_ns\":%llu,\"end_ns\":%llu,\"threads\":[", getpid(), t0, now(CLOCK_MONOTONIC));
	for (int i = 0; i < N; i++) {
		struct thr *t = &threads[i];
		printf("%s{\"name\":\"%s\",\"tid\":%d,\"start_ns\":%llu,\"end_ns\":%llu,\"funcs\":{", i ? "," : "",
		       t->name, t->tid, t->start, t->end);
		for (int j = 0; j < t->nf; j++)
			printf("%s\"%s\":{\"cpu_ns\":%llu,\"wall_ns\":%llu,\"calls\":%llu}", j ? "," : "", t->f[j].name,
			       t->f[j].cpu, t->f[j].wall, t->f[j].calls);
		printf("}}");
	}
	printf("]");
	if (windows)
		print_windows(windows);
	printf("}\n");
	return 0;
}
