// SPDX-License-Identifier: GPL-2.0
/*
 * start-stamp FILE CMD [ARGS...]: run CMD and write "START END STATUS" to
 * FILE: CLOCK_MONOTONIC in nanoseconds just before CMD is started and just
 * after it has ended, and its wait status. bench/trace_start.py times a
 * start with it the same way traced and untraced, and sees when a tool let
 * its command start. Built static onto a tmpfs, it reads nothing from
 * storage after the page cache is dropped.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	unsigned long long start, end;
	int status = 0;
	FILE *out;
	pid_t child;

	if (argc < 3) {
		fprintf(stderr, "usage: start-stamp FILE CMD [ARGS...]\n");
		return 2;
	}
	start = now_ns();
	child = fork();
	if (child < 0) {
		perror("start-stamp: fork");
		return 1;
	}
	if (child == 0) {
		execvp(argv[2], argv + 2);
		perror("start-stamp: exec");
		_exit(127);
	}
	if (waitpid(child, &status, 0) != child) {
		perror("start-stamp: waitpid");
		return 1;
	}
	end = now_ns();
	out = fopen(argv[1], "w");
	if (!out || fprintf(out, "%llu %llu %d\n", start, end, status) < 0 || fclose(out)) {
		perror("start-stamp: writing the stamp");
		return 1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
