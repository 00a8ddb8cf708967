/* One call site blocking on two kinds of file, for tests/fingerprint.rs:
 * offcputime keys a block by its user call path, and the kernel path under
 * one read() depends on the file (pipe_read for a pipe,
 * unix_stream_read_generic for a socket). Each kind's blocks must keep
 * their own kernel stack, not take the first kind's.
 *
 *   fdkinds N
 *
 * The main thread reads one byte N times from a pipe and N times from a
 * socket pair, alternating, through one function (read_one); a feeder
 * thread writes each byte 2 ms after the read before it returned. It
 * prints each kind's blocked time by its own CLOCK_MONOTONIC (ns) as
 * JSON. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int pipe_fd[2], sock_fd[2];
static unsigned long n_blocks;

static unsigned long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void *feeder(void *arg)
{
	(void)arg;
	for (unsigned long i = 0; i < 2 * n_blocks; i++) {
		struct timespec d = { 0, 2000000 };
		nanosleep(&d, NULL);
		if (write((i & 1) ? sock_fd[1] : pipe_fd[1], "x", 1) != 1)
			exit(1);
	}
	return NULL;
}

/* The one call site: the same user stack for both kinds. */
__attribute__((noinline)) unsigned long long read_one(int fd)
{
	char c;
	unsigned long long t0 = mono_ns();
	if (read(fd, &c, 1) != 1)
		exit(1);
	return mono_ns() - t0;
}

int main(int argc, char **argv)
{
	n_blocks = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
	if (pipe(pipe_fd) || socketpair(AF_UNIX, SOCK_STREAM, 0, sock_fd))
		return 1;
	pthread_t t;
	if (pthread_create(&t, NULL, feeder, NULL))
		return 1;
	/* One call instruction for both kinds (two branches would be two
	 * return addresses, two user stacks). */
	int fds[2] = { pipe_fd[0], sock_fd[0] };
	unsigned long long ns[2] = { 0, 0 };
	for (unsigned long i = 0; i < 2 * n_blocks; i++)
		ns[i & 1] += read_one(fds[i & 1]);
	pthread_join(t, NULL);
	printf("{\"pipe_ns\":%llu,\"sock_ns\":%llu}\n", ns[0], ns[1]);
	return 0;
}
