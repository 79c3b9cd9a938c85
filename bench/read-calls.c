/*
 * read-calls: the cost of a system call while a tracer watches them. With
 * "pread FILE COUNT", COUNT 1-byte preads of a cached FILE, one page after
 * the other (the file is read once first, so that nothing comes from
 * storage); with "getppid COUNT", COUNT getppid calls, the cheapest call.
 * Prints the nanoseconds per call.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int usage(void)
{
	fprintf(stderr, "usage: read-calls pread FILE COUNT | read-calls getppid COUNT\n");
	return 2;
}

static int preads(const char *path, long count)
{
	long page = sysconf(_SC_PAGESIZE), pages;
	char buf[4096];
	struct stat st;
	double start;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st) || (pages = st.st_size / page) < 1) {
		perror(path);
		return 1;
	}
	while (read(fd, buf, sizeof(buf)) > 0)	/* cached from here on */
		;
	start = now();
	for (long i = 0; i < count; i++) {
		if (pread(fd, buf, 1, (i % pages) * page) != 1) {
			perror("pread");
			return 1;
		}
	}
	printf("%.1f ns\n", (now() - start) / count * 1e9);
	return 0;
}

static int getppids(long count)
{
	double start = now();

	for (long i = 0; i < count; i++)
		syscall(SYS_getppid);
	printf("%.1f ns\n", (now() - start) / count * 1e9);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "pread") == 0)
		return preads(argv[2], atol(argv[3]));
	if (argc == 3 && strcmp(argv[1], "getppid") == 0)
		return getppids(atol(argv[2]));
	return usage();
}
