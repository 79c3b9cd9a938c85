/* The prefetch beside the start, run by the launch's grandchild: each
 * range of the kept files in the pack's (first-access) order, asked for
 * with posix_fadvise(WILLNEED), which reads exactly the pages asked for
 * (force_page_cache_ra(): no readahead window, no read-around, cached
 * pages skipped).
 *
 * At most --window bytes are asked for and not yet read back: WILLNEED
 * only queues reads, and an I/O scheduler (mq-deadline) dispatches a long
 * queue by sector, so a whole pack queued at once reaches the device in
 * about disk order and the start waits for the pages it needs first
 * behind pages it needs last. Reading the oldest ranges back (through
 * descriptors set to POSIX_FADV_RANDOM, which read nothing more) waits
 * for them. Measured on firefox-esr (docs/lab/case-study-firefox.md,
 * "2026-11-27"): 1 MiB in flight recovered 80-82% of the I/O cost where
 * no limit recovered 53%. */
#include "launch.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#define READ_BACK_BYTES (1u << 20)

struct queued {
	int fd;
	uint64_t offset, length;
};

struct window {
	struct queued *ring;
	size_t head, count, cap;
	uint64_t in_flight, limit;
	char *buffer;
};

static void read_back(struct window *w)
{
	struct queued *q = &w->ring[w->head];
	uint64_t done = 0;

	while (done < q->length) {
		size_t want = q->length - done < READ_BACK_BYTES ?
			(size_t)(q->length - done) : READ_BACK_BYTES;
		ssize_t got = pread(q->fd, w->buffer, want, (off_t)(q->offset + done));

		if (got <= 0)
			break;
		done += (uint64_t)got;
	}
	w->in_flight -= q->length;
	w->head = (w->head + 1) % w->cap;
	w->count--;
}

static void queue(struct window *w, int fd, uint64_t offset, uint64_t length)
{
	while (w->count && (w->count == w->cap || w->in_flight + length > w->limit))
		read_back(w);
	w->ring[(w->head + w->count) % w->cap] = (struct queued){fd, offset, length};
	w->count++;
	w->in_flight += length;
}

static int open_file(const struct pack_file *f, int windowed)
{
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);

	/* The read-back must read nothing more than was asked for. */
	if (fd >= 0 && windowed)
		posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	return fd;
}

void prefetch(const struct pack *pack, const struct skipped *s, uint64_t window)
{
	struct window w = {.limit = window, .cap = 4096};
	int *fds = malloc((pack->n_files + 1) * sizeof(*fds));

	if (!fds)
		return;
	for (size_t i = 0; i < pack->n_files; i++)
		fds[i] = -2; /* not opened yet */
	if (window && (!(w.ring = malloc(w.cap * sizeof(*w.ring))) ||
		       !(w.buffer = malloc(READ_BACK_BYTES))))
		window = 0;
	for (size_t i = 0; i < pack->n_ranges; i++) {
		const struct pack_range *r = &pack->ranges[i];
		uint64_t offset = r->page * pack->page_size;
		uint64_t length = r->pages * pack->page_size;

		if (s->reason[r->file])
			continue;
		if (fds[r->file] == -2)
			fds[r->file] = open_file(&pack->files[r->file], window != 0);
		if (fds[r->file] < 0)
			continue;
		if (window)
			queue(&w, fds[r->file], offset, length);
		posix_fadvise(fds[r->file], (off_t)offset, (off_t)length,
			      POSIX_FADV_WILLNEED);
	}
	for (size_t i = 0; i < pack->n_files; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	free(w.ring);
	free(w.buffer);
}
