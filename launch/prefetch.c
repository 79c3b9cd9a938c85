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
 * behind pages it needs last. Reading the oldest range's last byte back
 * (through a descriptor set to POSIX_FADV_RANDOM, which reads nothing
 * more) waits for it. Measured on firefox-esr (docs/lab/case-study-firefox.md,
 * "2026-11-27"): 1 MiB in flight recovered 80-82% of the I/O cost where
 * no limit recovered 53%.
 *
 * With --batch SIZE the pack is taken SIZE bytes of ranges at a time, in
 * first-access order from one batch to the next; inside a batch the
 * ranges are sorted by (file, page) and a file's ranges at most
 * --batch-gap pages apart are merged, the pages between them read too:
 * a pack's first-access order rarely puts a file's ranges side by side,
 * and each range asked for alone is at least one request to the device
 * (docs/lab/launch-slow-disks.md, "On the machine's disk"). The merged
 * requests are then asked for in the order of their first-used range, so
 * that a large file touched first does not hold back the next file's
 * first pages behind its last ones. */
#include "launch.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

struct queued {
	int fd;
	uint64_t offset, length;
};

struct window {
	struct queued *ring;
	size_t head, count, cap;
	uint64_t in_flight, limit;
};

/* Waits for the oldest range by reading one byte of its last page, the
 * page WILLNEED queued last: the pages before it went to the device in
 * the same or earlier requests. Reading the whole range back would copy
 * every page for nothing (measured: 7-15% of the prefetch's CPU time). */
static void read_back(struct window *w)
{
	struct queued *q = &w->ring[w->head];
	char byte;

	(void)!pread(q->fd, &byte, 1, (off_t)(q->offset + q->length - 1));
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

static int order(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

static int by_file_page(const void *a, const void *b)
{
	const struct request *x = a, *y = b;

	return x->file != y->file ? order(x->file, y->file) : order(x->page, y->page);
}

static int by_first(const void *a, const void *b)
{
	return order(((const struct request *)a)->first,
		     ((const struct request *)b)->first);
}

/* Merges the sorted R[0..N) in place: a file's next range that starts at
 * most GAP pages after the end of the one before joins it. The count
 * left; the pages between merged ranges are added to *FILLED. */
static size_t merge(struct request *r, size_t n, uint64_t gap, uint64_t *filled)
{
	size_t out = 0;

	for (size_t i = 1; i < n; i++) {
		struct request *last = &r[out];
		uint64_t end = last->page + last->pages;

		if (r[i].file == last->file && r[i].page <= end + gap) {
			if (r[i].first < last->first)
				last->first = r[i].first;
			if (r[i].page > end)
				*filled += r[i].page - end;
			if (r[i].page + r[i].pages > end)
				last->pages = r[i].page + r[i].pages - last->page;
		} else {
			r[++out] = r[i];
		}
	}
	return n ? out + 1 : 0;
}

/* Sorts and merges the batch OUT[START..N), then puts the merged
 * requests in first-use order; the new N. */
static size_t close_batch(struct request *out, size_t start, size_t n,
			  uint64_t gap, uint64_t *filled)
{
	qsort(out + start, n - start, sizeof(*out), by_file_page);
	n = start + merge(out + start, n - start, gap, filled);
	qsort(out + start, n - start, sizeof(*out), by_first);
	return n;
}

size_t plan_requests(const struct pack *pack, const struct skipped *s,
		     const struct batching *b, struct request *out,
		     uint64_t *filled)
{
	size_t n = 0, start = 0;
	uint64_t bytes = 0;

	*filled = 0;
	for (size_t i = 0; i < pack->n_ranges; i++) {
		const struct pack_range *r = &pack->ranges[i];

		if (s->reason[r->file])
			continue;
		out[n++] = (struct request){r->file, r->page, r->pages, i};
		bytes += r->pages * pack->page_size;
		if (b->bytes && bytes >= b->bytes) {
			start = n = close_batch(out, start, n, b->gap, filled);
			bytes = 0;
		}
	}
	if (b->bytes && start < n)
		n = close_batch(out, start, n, b->gap, filled);
	return n;
}

static void ask(const struct pack *pack, const struct request *q, int *fds,
		struct window *w, int windowed)
{
	uint64_t offset = q->page * pack->page_size;
	uint64_t length = q->pages * pack->page_size;

	if (fds[q->file] == -2)
		fds[q->file] = open_file(&pack->files[q->file], windowed);
	if (fds[q->file] < 0)
		return;
	if (windowed)
		queue(w, fds[q->file], offset, length);
	posix_fadvise(fds[q->file], (off_t)offset, (off_t)length,
		      POSIX_FADV_WILLNEED);
}

void prefetch(const struct pack *pack, const struct skipped *s,
	      uint64_t window, const struct batching *b)
{
	struct window w = {.limit = window, .cap = 4096};
	struct request *requests = malloc((pack->n_ranges + 1) * sizeof(*requests));
	int *fds = malloc((pack->n_files + 1) * sizeof(*fds));
	uint64_t filled;
	size_t n;

	if (!fds || !requests)
		goto out;
	for (size_t i = 0; i < pack->n_files; i++)
		fds[i] = -2; /* not opened yet */
	if (window && !(w.ring = malloc(w.cap * sizeof(*w.ring))))
		window = 0;
	n = plan_requests(pack, s, b, requests, &filled);
	for (size_t i = 0; i < n; i++)
		ask(pack, &requests[i], fds, &w, window != 0);
	for (size_t i = 0; i < pack->n_files; i++)
		if (fds[i] >= 0)
			close(fds[i]);
out:
	free(requests);
	free(fds);
	free(w.ring);
}
