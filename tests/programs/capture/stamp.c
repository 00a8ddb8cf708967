/* Prints the CLOCK_MONOTONIC time its main() began and ended at, having
 * slept argv[1] seconds between: the truth for where a launched command's
 * own time begins (tests/wallclock.rs, the_gate_is_not_the_commands_time). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	unsigned long long begin = mono_ns();
	double secs = argc > 1 ? atof(argv[1]) : 0.3;
	struct timespec d = { (time_t)secs, (long)((secs - (time_t)secs) * 1e9) };
	nanosleep(&d, NULL);
	printf("{\"main_ns\": %llu, \"end_ns\": %llu}\n", begin, mono_ns());
	return 0;
}
