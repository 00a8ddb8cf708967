/* Page faults in one known function: fault_pages() maps fresh anonymous
 * memory and writes one byte per page (a minor fault each); spin() burns
 * about as much CPU without faulting. Sampled on the cpu clock both
 * show; sampled on page faults nearly all weight is fault_pages().
 * Prints its own count of pages touched. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static long fault_pages(size_t bytes)
{
	long page = sysconf(_SC_PAGESIZE), n = 0;
	volatile char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	for (size_t off = 0; off < bytes; off += page, n++)
		p[off] = 1;
	munmap((void *)p, bytes);
	return n;
}

__attribute__((noinline)) static double spin(double secs)
{
	double t = now(), x = 0;
	while (now() - t < secs)
		for (int i = 0; i < 10000; i++)
			x += i * 0.5;
	return x;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 4;
	long pages = 0;
	double x = 0;
	for (int r = 0; r < rounds; r++) {
		pages += fault_pages(64 << 20);
		x += spin(0.1);
	}
	printf("pages %ld %g\n", pages, x > 0 ? 1.0 : 0.0);
	return 0;
}
