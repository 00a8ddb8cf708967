/* Threads that each wait on one object, for tests/objects.rs: the
 * capture must name what each waited on (wallclock-stream(5), `object`).
 *
 *   objects SECONDS DIR
 *
 * disk:     write 4K + fdatasync on DIR/ledger.dat      [file DIR/ledger.dat]
 * tcpread:  read on a TCP connection to 127.0.0.1:PORT  [tcp 127.0.0.1:PORT]
 * piperead: read on a pipe                              [pipe]
 * locker:   pthread_mutex_lock on g_ledger_lock         [lock g_ledger_lock]
 * heaplock: pthread_mutex_lock on a malloc'd mutex, in settle_account
 *                                                       [lock in settle_account]
 * waiter:   waitpid on a child (`sleep 0.3`)            [child sleep PID]
 *
 * and their helpers: a feeder writing a byte to the pipe and the socket
 * every 10 ms, a holder per lock keeping it 20 ms at a time and taking it
 * back at once. Each measured
 * thread times its own blocking calls by CLOCK_MONOTONIC (disk: less its
 * CPU clock over the calls, the kernel's work for them) and prints one
 * JSON line at the end: {"name":..,"tid":..,"wait_ns":..,"port":..}. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t g_ledger_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned long long end_ns;
static const char *dir;
static int pipe_fd[2], conn_fd = -1, client_fd = -1, port;
static atomic_int stop, heap_stop;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* The thread's own CPU clock: a write and an fdatasync run in the kernel
 * on this thread's CPU time for part of their wall time (the page copy,
 * the journal), which is on-CPU, not a wait. */
static unsigned long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void nap_ms(int ms)
{
	struct timespec ts = { 0, ms * 1000000L };
	nanosleep(&ts, 0);
}

static void report(const char *name, unsigned long long wait)
{
	pthread_mutex_lock(&out_lock);
	printf("{\"name\":\"%s\",\"tid\":%d,\"wait_ns\":%llu,\"port\":%d}\n", name, gettid(), wait, port);
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
}

static void *disk(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "disk");
	char path[4096], buf[4096];
	snprintf(path, sizeof(path), "%s/ledger.dat", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(path);
		exit(1);
	}
	memset(buf, 'x', sizeof(buf));
	unsigned long long wait = 0;
	for (int i = 0; mono_ns() < end_ns; i++) {
		unsigned long long t = mono_ns(), c = cpu_ns();
		if (pwrite(fd, buf, sizeof(buf), (i % 256) * 4096L) < 0 || fdatasync(fd) < 0) {
			perror("write");
			exit(1);
		}
		unsigned long long wall = mono_ns() - t, cpu = cpu_ns() - c;
		wait += wall > cpu ? wall - cpu : 0;
	}
	report("disk", wait);
	return 0;
}

static void *reader(void *arg)
{
	int is_tcp = arg != 0;
	prctl(PR_SET_NAME, is_tcp ? "tcpread" : "piperead");
	int fd = is_tcp ? client_fd : pipe_fd[0];
	unsigned long long wait = 0;
	char c;
	for (;;) {
		unsigned long long t = mono_ns();
		if (read(fd, &c, 1) != 1)
			break;
		wait += mono_ns() - t;
		if (c == 'q')
			break;
	}
	report(is_tcp ? "tcpread" : "piperead", wait);
	return 0;
}

static void *feeder(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "feeder");
	while (mono_ns() < end_ns) {
		nap_ms(10);
		if (write(pipe_fd[1], "x", 1) != 1 || write(conn_fd, "x", 1) != 1)
			exit(1);
	}
	if (write(pipe_fd[1], "q", 1) != 1 || write(conn_fd, "q", 1) != 1)
		exit(1);
	return 0;
}

static void *locker(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "locker");
	/* The lowest priority: woken by the holder's unlock, it does not
	 * preempt the holder, which takes the lock back first; its time is
	 * then the wait for the lock, not a race for it. */
	setpriority(PRIO_PROCESS, gettid(), 19);
	unsigned long long wait = 0;
	while (!atomic_load(&stop)) {
		unsigned long long t = mono_ns();
		pthread_mutex_lock(&g_ledger_lock);
		wait += mono_ns() - t;
		pthread_mutex_unlock(&g_ledger_lock);
	}
	report("locker", wait);
	return 0;
}

/* Holds the lock 20 ms at a time and takes it back at once: the locker,
 * woken by each unlock, mostly finds it taken again and waits on. */
static void *holder(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "holder");
	while (mono_ns() < end_ns) {
		pthread_mutex_lock(&g_ledger_lock);
		nap_ms(20);
		pthread_mutex_unlock(&g_ledger_lock);
	}
	atomic_store(&stop, 1);
	return 0;
}

/* The heap's lock: no symbol holds it, its address changes with every
 * run; the capture names it by where it is waited on most. */
static pthread_mutex_t *heap_lock;

/* Not inlined: the frame that names the heap lock. */
__attribute__((noinline)) unsigned long long settle_account(pthread_mutex_t *m)
{
	unsigned long long t = mono_ns();
	pthread_mutex_lock(m);
	t = mono_ns() - t;
	pthread_mutex_unlock(m);
	return t;
}

static void *heaplocker(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "heaplock");
	setpriority(PRIO_PROCESS, gettid(), 19);
	unsigned long long wait = 0;
	while (!atomic_load(&heap_stop))
		wait += settle_account(heap_lock);
	report("heaplock", wait);
	return 0;
}

static void *heapholder(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "heapholder");
	while (mono_ns() < end_ns) {
		pthread_mutex_lock(heap_lock);
		nap_ms(20);
		pthread_mutex_unlock(heap_lock);
	}
	atomic_store(&heap_stop, 1);
	return 0;
}

static void *waiter(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "waiter");
	unsigned long long wait = 0;
	while (mono_ns() < end_ns) {
		pid_t kid = fork();
		if (kid == 0) {
			execlp("sleep", "sleep", "0.3", (char *)0);
			_exit(127);
		}
		unsigned long long t = mono_ns();
		int st;
		if (waitpid(kid, &st, 0) != kid)
			exit(1);
		wait += mono_ns() - t;
	}
	report("waiter", wait);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: objects SECONDS DIR\n");
		return 2;
	}
	end_ns = mono_ns() + (unsigned long long)(atof(argv[1]) * 1e9);
	dir = argv[2];
	if (pipe(pipe_fd))
		return 1;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	if (l < 0 || bind(l, (void *)&a, sizeof(a)) || listen(l, 1) || getsockname(l, (void *)&a, &len))
		return 1;
	port = ntohs(a.sin_port);
	client_fd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(client_fd, (void *)&a, sizeof(a)))
		return 1;
	conn_fd = accept(l, 0, 0);
	if (conn_fd < 0)
		return 1;
	heap_lock = malloc(sizeof(*heap_lock));
	if (!heap_lock || pthread_mutex_init(heap_lock, 0))
		return 1;
	pthread_t t[9];
	pthread_create(&t[0], 0, disk, 0);
	pthread_create(&t[1], 0, reader, (void *)1);
	pthread_create(&t[2], 0, reader, 0);
	pthread_create(&t[3], 0, locker, 0);
	pthread_create(&t[4], 0, holder, 0);
	pthread_create(&t[5], 0, waiter, 0);
	pthread_create(&t[6], 0, feeder, 0);
	pthread_create(&t[7], 0, heaplocker, 0);
	pthread_create(&t[8], 0, heapholder, 0);
	for (int i = 0; i < 9; i++)
		pthread_join(t[i], 0);
	return 0;
}
