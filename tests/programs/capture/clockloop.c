/* Reads CLOCK_MONOTONIC in a loop for argv[1] seconds: nearly all of its
 * time is in clock_gettime's vDSO code, which only the vDSO's own unwind
 * table leads out of (tests/capture.rs, vdso_samples_keep_their_callers). */
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE double read_clock(int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += mono();
	return s;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	double end = mono() + secs, s = 0;
	while (mono() < end)
		s += read_clock(10000);
	return s == 0.0;
}
