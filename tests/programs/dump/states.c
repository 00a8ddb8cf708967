/* Threads in known states, for `wallclock dump` and `wallclock top`
 * (tests/dump.rs, tests/top.rs): one asleep since its start, two
 * spinning, one in an fdatasync loop, one holding a mutex while it
 * sleeps and one waiting on that mutex; `states DIR [EXTRA]` writes its
 * fdatasync file in DIR and starts EXTRA more sleeping threads.
 *
 * Prints `thread NAME TID` for each, `sleeper since NS` (CLOCK_MONOTONIC,
 * the BPF clock) just before the sleeper sleeps, `ready`, and then every
 * 10 ms `cpu MONO_NS MONO_NS NAME CPU_NS ...`: each thread's own CPU clock,
 * read between the two CLOCK_MONOTONIC stamps. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#define NAMED 6
static const char *names[NAMED] = {"sleeper", "spin1", "spin2", "syncer", "holder", "waiter"};
static pthread_t tids[NAMED];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t started;
static const char *dir;
static volatile unsigned long sink;
static volatile long waiter_tid;

static unsigned long long mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void hello(const char *name)
{
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&out);
	printf("thread %s %ld\n", name, (long)syscall(SYS_gettid));
	fflush(stdout);
	pthread_mutex_unlock(&out);
}

/* Set once the sleeper has said when it slept: `ready` waits for it (on a
 * loaded machine the sleeper may not have run yet when the waiter sleeps). */
static int sleeper_said;

__attribute__((noinline)) static void sleep_forever(void)
{
	pthread_mutex_lock(&out);
	printf("sleeper since %llu\n", mono());
	fflush(stdout);
	__atomic_store_n(&sleeper_said, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&out);
	for (;;)
		sleep(100000);
}

__attribute__((noinline)) static void spin_a(void)
{
	for (;;)
		sink++;
}

__attribute__((noinline)) static void spin_b(void)
{
	for (;;)
		sink--;
}

__attribute__((noinline)) static void sync_loop(void)
{
	/* 1 MiB a write, O_DIRECT where the file system takes it: the
	 * thread waits (D) for the device itself, not for a copy into the
	 * page cache, so most of its time is in D also where the disk
	 * answers in microseconds (a host's cache behind a VM's disk: the
	 * buffered 256 KiB + fdatasync of before was seen in D in none of 35
	 * dumps on such a machine). */
	enum { SZ = 1 << 20 };
	char *buf;
	char path[4096];
	snprintf(path, sizeof path, "%s/states.sync", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
	if (fd < 0)
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || posix_memalign((void **)&buf, 4096, SZ) != 0) {
		perror(path);
		exit(1);
	}
	memset(buf, 'x', SZ);
	for (unsigned long i = 0;; i++) {
		if (pwrite(fd, buf, SZ, (i % 8) * (off_t)SZ) < 0 || fdatasync(fd) < 0) {
			perror("syncer");
			exit(1);
		}
	}
}

__attribute__((noinline)) static void hold_lock(void)
{
	pthread_mutex_lock(&lock);
	for (;;)
		sleep(100000);
}

__attribute__((noinline)) static void wait_lock(void)
{
	/* The holder takes it first (main starts the holder and waits). */
	pthread_mutex_lock(&lock);
	pthread_mutex_unlock(&lock);
}

static void *run(void *arg)
{
	long i = (long)arg;
	hello(names[i]);
	if (i == 5)
		waiter_tid = syscall(SYS_gettid);
	if (i != 5)
		pthread_barrier_wait(&started);
	switch (i) {
	case 0: sleep_forever(); break;
	case 1: spin_a(); break;
	case 2: spin_b(); break;
	case 3: sync_loop(); break;
	case 4: hold_lock(); break;
	case 5: wait_lock(); break;
	}
	return NULL;
}

__attribute__((noinline)) static void *extra(void *arg)
{
	(void)arg;
	for (;;)
		sleep(100000);
	return NULL;
}

int main(int argc, char **argv)
{
	dir = argc > 1 ? argv[1] : "/tmp";
	long n_extra = argc > 2 ? atol(argv[2]) : 0;
	pthread_barrier_init(&started, NULL, NAMED);
	for (long i = 0; i < 5; i++)
		pthread_create(&tids[i], NULL, run, (void *)i);
	pthread_barrier_wait(&started);
	/* The holder has the lock once it sleeps: wait for that. */
	while (pthread_mutex_trylock(&lock) == 0) {
		pthread_mutex_unlock(&lock);
		usleep(1000);
	}
	pthread_create(&tids[5], NULL, run, (void *)5L);
	pthread_attr_t small;
	pthread_attr_init(&small);
	pthread_attr_setstacksize(&small, 64 * 1024);
	for (long i = 0; i < n_extra; i++) {
		pthread_t t;
		if (pthread_create(&t, &small, extra, NULL)) {
			perror("pthread_create");
			return 1;
		}
	}
	/* Ready once the waiter sleeps on the mutex (S in its stat) and the
	 * sleeper has said when it slept. */
	for (;;) {
		char path[64], buf[256];
		long tid = waiter_tid;
		if (tid) {
			snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
			FILE *f = fopen(path, "r");
			char *rp = f && fgets(buf, sizeof buf, f) ? strrchr(buf, ')') : NULL;
			if (f)
				fclose(f);
			if (rp && rp[1] == ' ' && rp[2] == 'S' && __atomic_load_n(&sleeper_said, __ATOMIC_ACQUIRE))
				break;
		}
		usleep(1000);
	}
	printf("ready\n");
	fflush(stdout);
	clockid_t clk[NAMED];
	for (int i = 0; i < NAMED; i++)
		pthread_getcpuclockid(tids[i], &clk[i]);
	for (;;) {
		/* The clocks are read between two stamps: this thread can be
		 * preempted among the reads (each a system call) on a loaded
		 * machine, and the clocks are then of a later time than the
		 * first stamp. */
		unsigned long long cpu[NAMED], t0 = mono();
		for (int i = 0; i < NAMED; i++) {
			struct timespec ts;
			clock_gettime(clk[i], &ts);
			cpu[i] = ts.tv_sec * 1000000000ull + ts.tv_nsec;
		}
		printf("cpu %llu %llu", t0, mono());
		for (int i = 0; i < NAMED; i++)
			printf(" %s %llu", names[i], cpu[i]);
		printf("\n");
		fflush(stdout);
		usleep(10000);
	}
}
