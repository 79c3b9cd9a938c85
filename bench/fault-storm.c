/*
 * fault-storm: the tracer's worst case. Maps FILE with MADV_RANDOM, so that
 * fault read-around cannot merge reads, and touches COUNT distinct random
 * pages: one page-sized read from storage per fault, as many events per
 * second as the device allows. Prints the elapsed seconds of the touching.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long page = sysconf(_SC_PAGESIZE), pages, count, sum = 0;
	unsigned long long state = 88172645463325252ULL;
	unsigned char *map, *seen;
	struct stat st;
	double start;
	int fd;

	if (argc != 3) {
		fprintf(stderr, "usage: fault-storm FILE COUNT\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY);
	if (fd < 0 || fstat(fd, &st)) {
		perror(argv[1]);
		return 1;
	}
	pages = st.st_size / page;
	count = atol(argv[2]);
	if (count > pages)
		count = pages;
	map = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	seen = calloc(pages, 1);
	if (map == MAP_FAILED || !seen || madvise(map, st.st_size, MADV_RANDOM)) {
		perror("fault-storm");
		return 1;
	}
	start = now();
	for (long done = 0; done < count;) {
		long p;

		state ^= state << 13, state ^= state >> 7, state ^= state << 17;
		p = (long)(state % (unsigned long long)pages);
		if (seen[p])
			continue;
		seen[p] = 1;
		sum += map[p * page];
		done++;
	}
	printf("%.6f %ld\n", now() - start, sum & 1);
	return 0;
}
