/* The monotonic clock of the C tools, in nanoseconds and in seconds, so
 * that each tool does not write its own clock_gettime() wrapper. */
#ifndef PAGETRACE_CLOCK_H
#define PAGETRACE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double monotonic_s(void)
{
	return (double)monotonic_ns() / 1e9;
}

#endif
