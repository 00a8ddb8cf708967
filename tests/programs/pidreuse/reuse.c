/* Two processes, one after the other, under one pid: the first
 * (comm reuse_first) sleeps in first_sleeper and exits; once it is reaped
 * the next pid is set to its pid (ns_last_pid) and forked until a child
 * gets it: that one (comm reuse_second) sleeps in second_sleeper. Each
 * prints "NAME PID T0 T1": its sleep by its own CLOCK_MONOTONIC.
 * Usage: reuse CGROUP_PROCS|- GAP_MS SLEEP_MS (needs root: ns_last_pid). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long sleep_ms;

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void say(const char *name, unsigned long long t0, unsigned long long t1)
{
	char line[128];
	int n = snprintf(line, sizeof line, "%s %d %llu %llu\n", name, getpid(), t0, t1);
	if (write(1, line, n) != n)
		_exit(3);
}

static void nap(void)
{
	struct timespec ts = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

__attribute__((noinline)) void first_sleeper(void)
{
	unsigned long long t0 = now_ns();
	nap();
	say("reuse_first", t0, now_ns());
}

__attribute__((noinline)) void second_sleeper(void)
{
	unsigned long long t0 = now_ns();
	nap();
	say("reuse_second", t0, now_ns());
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: reuse CGROUP_PROCS|- GAP_MS SLEEP_MS\n");
		return 2;
	}
	sleep_ms = atol(argv[3]);
	if (strcmp(argv[1], "-") != 0) {
		FILE *f = fopen(argv[1], "w");
		if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0) {
			perror(argv[1]);
			return 2;
		}
	}
	pid_t first = fork();
	if (first == 0) {
		prctl(PR_SET_NAME, "reuse_first");
		first_sleeper();
		_exit(0);
	}
	waitpid(first, NULL, 0);
	usleep(atol(argv[2]) * 1000);
	/* The lock CRIU and others take around ns_last_pid. */
	int fd = open("/proc/sys/kernel/ns_last_pid", O_RDWR);
	if (fd < 0) {
		perror("ns_last_pid");
		return 2;
	}
	for (int tries = 0; tries < 2000; tries++) {
		char buf[32];
		int n = snprintf(buf, sizeof buf, "%d", first - 1);
		flock(fd, LOCK_EX);
		if (pwrite(fd, buf, n, 0) != n) {
			perror("ns_last_pid");
			return 2;
		}
		pid_t c = fork();
		if (c == 0) {
			if (getpid() != first)
				_exit(0);
			prctl(PR_SET_NAME, "reuse_second");
			second_sleeper();
			_exit(0);
		}
		flock(fd, LOCK_UN);
		waitpid(c, NULL, 0);
		if (c == first)
			return 0;
	}
	fprintf(stderr, "reuse: no child got pid %d in 2000 forks\n", first);
	return 1;
}
