/* tests/tracepoints.rs: writes a known sequence (fd, count) and prints
 * each as it did it, so a tp:syscalls:sys_enter_write probe's fields can
 * be checked against the program's own account. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char buf[4096];
	memset(buf, 'x', sizeof(buf));
	int null = open("/dev/null", O_WRONLY);
	if (null < 0)
		return 1;
	/* Big-ish fd numbers no other write of the process uses. */
	int fd = dup2(null, 57);
	for (int i = 1; i <= 12; i++) {
		size_t n = (size_t)(i * 317);
		if (write(fd, buf, n) != (ssize_t)n)
			return 1;
		fprintf(stderr, "wrote %d %zu\n", fd, n);
		usleep(5000);
	}
	return 0;
}
