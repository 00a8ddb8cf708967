/* Threads that measure their own clocks: a spinner, a napper (1 ms
 * sleeps) and a mixed one (2 ms of work, 3 ms asleep), each reading
 * (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID) about every millisecond,
 * until SIGTERM or SIGINT. Then it prints, as one JSON object, each
 * thread's tid, name and its readings (ns), for a test to read each
 * thread's own CPU time over any window (tests/onewindow.rs). The main
 * thread waits for the signal in sigwait. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_READS 200000

struct reading {
	unsigned long long mono, cpu;
};

struct worker {
	const char *name;
	int kind;
	pid_t tid;
	pthread_t thread;
	int n;
	struct reading *r;
};

static atomic_int stop;

static unsigned long long now(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void record(struct worker *w)
{
	if (w->n < MAX_READS) {
		w->r[w->n].mono = now(CLOCK_MONOTONIC);
		w->r[w->n].cpu = now(CLOCK_THREAD_CPUTIME_ID);
		w->n++;
	}
}

static void nap_us(long us)
{
	struct timespec ts = { 0, us * 1000 };
	nanosleep(&ts, NULL);
}

/* Work until `us` of this thread's CPU time has passed, reading the
 * clocks every millisecond of it. */
static void spin_us(struct worker *w, long us)
{
	unsigned long long end = now(CLOCK_THREAD_CPUTIME_ID) + us * 1000ULL, next = 0;
	volatile unsigned long x = 0;
	for (;;) {
		unsigned long long c = now(CLOCK_THREAD_CPUTIME_ID);
		if (c >= end || atomic_load(&stop))
			break;
		if (c >= next) {
			record(w);
			next = c + 1000000;
		}
		for (int i = 0; i < 2000; i++)
			x += i;
	}
}

static void *run(void *arg)
{
	struct worker *w = arg;
	w->tid = syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), w->name);
	while (!atomic_load(&stop)) {
		record(w);
		switch (w->kind) {
		case 0:
			spin_us(w, 1000000);
			break;
		case 1:
			nap_us(1000);
			break;
		default:
			spin_us(w, 2000);
			nap_us(3000);
			break;
		}
	}
	record(w);
	return NULL;
}

int main(void)
{
	static struct worker ws[] = { { "oc-spin", 0 }, { "oc-nap", 1 }, { "oc-mixed", 2 } };
	const int nw = sizeof(ws) / sizeof(ws[0]);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	for (int i = 0; i < nw; i++) {
		ws[i].r = calloc(MAX_READS, sizeof(struct reading));
		pthread_create(&ws[i].thread, NULL, run, &ws[i]);
	}
	/* Started: the test may attach once it reads this line. */
	fprintf(stderr, "ready\n");
	int sig;
	sigwait(&set, &sig);
	atomic_store(&stop, 1);
	for (int i = 0; i < nw; i++)
		pthread_join(ws[i].thread, NULL);
	printf("{\"pid\":%d,\"threads\":[", getpid());
	for (int i = 0; i < nw; i++) {
		printf("%s{\"tid\":%d,\"name\":\"%s\",\"reads\":[", i ? "," : "", ws[i].tid, ws[i].name);
		for (int j = 0; j < ws[i].n; j++)
			printf("%s[%llu,%llu]", j ? "," : "", ws[i].r[j].mono, ws[i].r[j].cpu);
		printf("]}");
	}
	printf("]}\n");
	return 0;
}
