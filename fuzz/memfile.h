/* The fuzzers' bytes as a file: readers that take a path (packs, drive
 * profiles) read a memfd through /proc/self/fd/N. */
#ifndef PAGETRACE_FUZZ_MEMFILE_H
#define PAGETRACE_FUZZ_MEMFILE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct memfile {
	int fd;
	char path[32];
};

/* @size bytes of @data in a fresh memfd, named in @m->path; -1 if it
 * cannot be made (the run is then skipped, not failed). */
static inline int memfile_open(struct memfile *m, const void *data, size_t size)
{
	const char *p = data;
	size_t done = 0;

	m->fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (m->fd < 0)
		return -1;
	while (done < size) {
		ssize_t n = write(m->fd, p + done, size - done);

		if (n <= 0) {
			close(m->fd);
			return -1;
		}
		done += (size_t)n;
	}
	snprintf(m->path, sizeof(m->path), "/proc/self/fd/%d", m->fd);
	return 0;
}

static inline void memfile_close(struct memfile *m)
{
	close(m->fd);
}

#endif
