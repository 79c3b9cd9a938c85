/* Issuing the plan: O_DIRECT or buffered reads, or readahead for
 * --prefetch, from --queue-depth worker threads that take requests in plan
 * order; --timing holds each request until its trace time; a progress line
 * when stderr is a terminal. */
#include "replay.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

/* Linux 6.5 uapi, not in Debian 12's headers. */
struct cachestat_range {
	uint64_t off, len;
};

struct cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted,
		 nr_recently_evicted;
};

struct run {
	struct replay *r;
	atomic_size_t next;          /* next request to issue */
	atomic_size_t completed;
	atomic_uint_fast64_t bytes;
	atomic_int workers_left;
	atomic_int cachestat_missing;
	pthread_mutex_t report_lock; /* skip_message and r->skipped */
	struct timespec start;
	uint64_t first_timestamp_us;
	size_t buffer_size;
	size_t system_page;
};

struct worker {
	struct run *run;
	pthread_t thread;
	void *buffer;
	uint64_t late_requests, worst_lateness_us;
	size_t *issued;            /* --window: prefetched, not waited for */
	size_t issued_head, issued_count;
	uint64_t in_flight;        /* their bytes */
};

static uint64_t ns_of(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

static uint64_t pages_of(const struct replay *r, const struct request *q)
{
	return (q->length + r->page_size - 1) / r->page_size;
}

/* Counts a failed request's pages under REASON; reports the file once. */
static void request_failed(struct run *run, struct request *q,
			   enum skip_reason reason, const char *why)
{
	struct replay *r = run->r;
	struct replay_file *f = &r->files[q->file];

	pthread_mutex_lock(&run->report_lock);
	if (f->state == FILE_OPEN) {
		f->state = FILE_SKIPPED;   /* reported; later failures silent */
		skip_message(r, reason, pages_of(r, q), f->path, f->path_len,
			     "%s", why);
	} else {
		r->skipped[reason] += pages_of(r, q);
	}
	pthread_mutex_unlock(&run->report_lock);
}

/* Reads LEN bytes at OFFSET, looping over short reads; returns the bytes
 * read (less at end of file) or -1. */
static ssize_t read_fully(int fd, void *buffer, size_t len, uint64_t offset)
{
	size_t total = 0;

	while (total < len) {
		ssize_t got = pread(fd, (char *)buffer + total, len - total,
				    (off_t)(offset + total));

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -1;
		if (got == 0)
			break;
		total += (size_t)got;
	}
	return (ssize_t)total;
}

/* O_DIRECT wants offset and length in whole blocks: the read may start
 * before and end after the traced range (the file's last partial block
 * comes back short); only the traced bytes are counted. */
static void read_request(struct worker *w, struct request *q)
{
	struct replay *r = w->run->r;
	const struct replay_file *f = &r->files[q->file];
	uint64_t align = r->opt.mode == MODE_DIRECT ? f->align : 1;
	uint64_t start = q->offset - q->offset % align;
	uint64_t end = q->offset + q->length;
	ssize_t got;

	end = (end + align - 1) / align * align;
	got = read_fully(f->fd, w->buffer, (size_t)(end - start), start);
	if (got < 0 && errno == EINVAL && r->opt.mode == MODE_DIRECT) {
		request_failed(w->run, q, SKIP_ODIRECT_REFUSED,
			       "O_DIRECT read refused (Invalid argument); "
			       "try --buffered");
		return;
	}
	if (got < 0) {
		request_failed(w->run, q, SKIP_IO_ERROR,
			       errmsg_strerror(errno));
		return;
	}
	if ((uint64_t)got > q->offset - start)
		q->bytes_done = (uint64_t)got - (q->offset - start);
	if (q->bytes_done > q->length)
		q->bytes_done = q->length;
	q->done = 1;
}

static int resident_by_mincore(struct run *run, int fd, uint64_t offset,
			       uint64_t length)
{
	uint64_t start = offset - offset % run->system_page;
	size_t len = (size_t)(offset + length - start);
	size_t pages = (len + run->system_page - 1) / run->system_page, i;
	unsigned char *vec = malloc(pages);
	void *map = MAP_FAILED;
	int resident = 0;

	if (!vec)
		goto cleanup;
	map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)start);
	if (map == MAP_FAILED || mincore(map, len, vec) < 0)
		goto cleanup;
	for (i = 0; i < pages && (vec[i] & 1); i++)
		;
	resident = i == pages;
cleanup:
	if (map != MAP_FAILED)
		munmap(map, len);
	free(vec);
	return resident;
}

/* Whether every page of the range is cached: cachestat(2) (Linux 6.5)
 * answers without mapping anything; mincore(2) otherwise.
 * PAGETRACE_NO_CACHESTAT forces the fallback, for its tests. */
static int range_resident(struct run *run, int fd, uint64_t offset,
			  uint64_t length)
{
	struct cachestat_range range = {offset, length};
	struct cachestat cs;
	uint64_t first = offset / run->system_page;
	uint64_t last = (offset + length - 1) / run->system_page;

	if (!atomic_load(&run->cachestat_missing)) {
		if (syscall(__NR_cachestat, fd, &range, &cs, 0) == 0)
			return cs.nr_cache >= last - first + 1;
		if (errno == ENOSYS)
			atomic_store(&run->cachestat_missing, 1);
	}
	return resident_by_mincore(run, fd, offset, length);
}

/* readahead(2) (and its fallback, fadvise WILLNEED) goes to
 * force_page_cache_ra(): it reads exactly the pages asked for, with no
 * readahead window and no read-around, so --prefetch (and --used) fill
 * the cache with the traced pages and nothing else. A buffered read() of
 * the range would not: a read at offset 0 starts a readahead window (16
 * pages for a 3-page read on the test VM), and touching an mmap of the
 * file reads around the fault (256 pages for one). The wait pass below
 * reads through fds set to POSIX_FADV_RANDOM, which does no readahead
 * either, should a page have been reclaimed in between. */
static void prefetch_request(struct worker *w, struct request *q)
{
	struct run *run = w->run;
	const struct replay_file *f = &run->r->files[q->file];
	int err = 0;

	if (range_resident(run, f->fd, q->offset, q->length)) {
		q->resident = 1;
		return;
	}
	if (readahead(f->fd, (off64_t)q->offset, (size_t)q->length) < 0) {
		/* Some filesystems lack readahead(2) but take fadvise. */
		err = posix_fadvise(f->fd, (off_t)q->offset, (off_t)q->length,
				    POSIX_FADV_WILLNEED);
	}
	if (err) {
		request_failed(run, q, SKIP_IO_ERROR, errmsg_strerror(err));
		return;
	}
	q->bytes_done = q->length;
	q->done = 1;
}

/* Waits for a prefetched request's pages by reading them back: the fds
 * have POSIX_FADV_RANDOM, so this reads nothing more than was asked. */
static void wait_request(struct run *run, void *buffer, struct request *q)
{
	const struct replay_file *f = &run->r->files[q->file];

	q->waited = 1;
	if (q->done && read_fully(f->fd, buffer, (size_t)q->length,
				  q->offset) < 0) {
		q->done = 0;
		q->bytes_done = 0;
		request_failed(run, q, SKIP_IO_ERROR, errmsg_strerror(errno));
	}
}

/* --window: readahead(2) only queues its reads, and an I/O scheduler
 * (mq-deadline) sorts what is queued by sector, so a whole list queued at
 * once reaches the device in disk order, not in the plan's: a program
 * started beside the prefetch then waits for pages it needs first behind
 * pages it needs last. Waiting for the oldest requests until the new one
 * fits keeps at most --window bytes queued by this worker. */
static void keep_window(struct worker *w, const struct request *next)
{
	struct run *run = w->run;
	struct replay *r = run->r;

	while (w->issued_count &&
	       w->in_flight + next->length > r->opt.window) {
		struct request *q = &r->requests[w->issued[w->issued_head]];

		w->issued_head++;
		w->issued_count--;
		w->in_flight -= q->length;
		wait_request(run, w->buffer, q);
	}
}

static void prefetch_in_window(struct worker *w, size_t i)
{
	struct request *q = &w->run->r->requests[i];

	if (!w->issued) {
		prefetch_request(w, q);
		return;
	}
	keep_window(w, q);
	prefetch_request(w, q);
	if (q->done) {
		w->issued[w->issued_head + w->issued_count++] = i;
		w->in_flight += q->length;
	}
}

/* --timing: absolute deadlines from the start, so that oversleeping once
 * does not push every later request back (the drift correction fio's
 * iolog_delay does by hand). */
static void wait_for_trace_time(struct worker *w, const struct request *q)
{
	struct run *run = w->run;
	uint64_t offset_us = q->timestamp_us > run->first_timestamp_us ?
		q->timestamp_us - run->first_timestamp_us : 0;
	uint64_t deadline = ns_of(&run->start) + offset_us * 1000;
	uint64_t now = monotonic_ns();
	struct timespec ts = {(time_t)(deadline / 1000000000ull),
			      (long)(deadline % 1000000000ull)};

	if (now > deadline + 1000000) {
		uint64_t late_us = (now - deadline) / 1000;

		w->late_requests++;
		if (late_us > w->worst_lateness_us)
			w->worst_lateness_us = late_us;
		return;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct run *run = w->run;
	struct replay *r = run->r;
	size_t i;

	while (!__atomic_load_n(&r->fatal, __ATOMIC_RELAXED) &&
	       (i = atomic_fetch_add(&run->next, 1)) < r->n_requests) {
		struct request *q = &r->requests[i];

		if (r->opt.timing)
			wait_for_trace_time(w, q);
		q->start_ns = monotonic_ns() - ns_of(&run->start);
		if (r->opt.mode == MODE_PREFETCH)
			prefetch_in_window(w, i);
		else
			read_request(w, q);
		q->end_ns = monotonic_ns() - ns_of(&run->start);
		atomic_fetch_add(&run->bytes, q->bytes_done);
		atomic_fetch_add(&run->completed, 1);
	}
	atomic_fetch_sub(&run->workers_left, 1);
	return NULL;
}

static void show_progress(struct run *run, int last)
{
	double elapsed = (double)(monotonic_ns() - ns_of(&run->start)) / 1e9;
	double mib = (double)atomic_load(&run->bytes) / (1024.0 * 1024.0);

	if (last) {
		fputs("\r\033[K", stderr);
		return;
	}
	fprintf(stderr, "\r%s: %zu/%zu requests, %.1f MiB, %.1f MiB/s\033[K",
		errmsg_tool(), atomic_load(&run->completed),
		run->r->n_requests, mib,
		elapsed > 0 ? mib / elapsed : 0.0);
}

/* The largest request, in whole alignment blocks, plus room to align the
 * start down. */
static size_t buffer_size(const struct replay *r)
{
	uint64_t size = 0;
	size_t i;

	for (i = 0; i < r->n_requests; i++) {
		const struct request *q = &r->requests[i];
		uint64_t align = r->files[q->file].align;
		uint64_t need = q->length + 2 * align;

		if (need > size)
			size = need;
	}
	return (size_t)size;
}

/* A request's buffer, physically contiguous where the kernel can make it
 * so: in 2 MiB transparent huge pages when THP is on (also in "madvise"
 * mode). An O_DIRECT read into scattered 4 KiB pages needs one segment per
 * page, and a 1 MiB read then exceeds a queue's max_segments (254 on
 * virtio) and is split into two bios, or not, depending on where the pages
 * happened to land: measured under blk-throttle, where every bio is charged,
 * the same plan took 4.6 s in one run and 7.3 s in the next. */
static int alloc_buffer(void **buffer, size_t size)
{
	size_t huge = 2u << 20;
	int err;

	size = (size + huge - 1) / huge * huge;
	err = posix_memalign(buffer, huge, size);
	if (err == 0)
		madvise(*buffer, size, MADV_HUGEPAGE);
	return err;
}

static int start_workers(struct run *run, struct worker *workers, int n)
{
	int i, err;

	for (i = 0; i < n; i++) {
		workers[i].run = run;
		if (run->r->opt.window && run->r->opt.mode == MODE_PREFETCH &&
		    !(workers[i].issued = calloc(run->r->n_requests + 1,
						 sizeof(size_t)))) {
			errmsg("window", "%s", errmsg_strerror(ENOMEM));
			return i;
		}
		err = alloc_buffer(&workers[i].buffer, run->buffer_size);
		if (err) {
			errmsg("buffer", "%s", errmsg_strerror(err));
			free(workers[i].issued);
			return i;
		}
		err = pthread_create(&workers[i].thread, NULL, worker_main,
				     &workers[i]);
		if (err) {
			errmsg("thread", "%s", errmsg_strerror(err));
			free(workers[i].buffer);
			free(workers[i].issued);
			return i;
		}
	}
	return n;
}

static void wait_for_workers(struct run *run, struct worker *workers,
			     int started)
{
	int progress = !run->r->opt.quiet && isatty(STDERR_FILENO), i;
	struct timespec tick = {0, 100 * 1000 * 1000};

	while (progress && atomic_load(&run->workers_left) > 0) {
		show_progress(run, 0);
		nanosleep(&tick, NULL);
	}
	if (progress)
		show_progress(run, 1);
	for (i = 0; i < started; i++) {
		pthread_join(workers[i].thread, NULL);
		free(workers[i].buffer);
		free(workers[i].issued);
		if (workers[i].late_requests)
			run->r->stats.late_requests += workers[i].late_requests;
		if (workers[i].worst_lateness_us > run->r->stats.worst_lateness_us)
			run->r->stats.worst_lateness_us =
				workers[i].worst_lateness_us;
	}
}

/* readahead(2) returns once the reads are queued; reading the ranges back
 * through the cache waits for them (the fds have POSIX_FADV_RANDOM, so this
 * reads nothing more than was asked), and so --prefetch's elapsed time is
 * the time until the cache is really filled. */
static void wait_for_prefetch(struct run *run)
{
	struct replay *r = run->r;
	void *buffer = NULL;
	size_t i;

	if (alloc_buffer(&buffer, run->buffer_size))
		return;
	for (i = 0; i < r->n_requests; i++)
		if (!r->requests[i].waited)
			wait_request(run, buffer, &r->requests[i]);
	free(buffer);
}

static void collect_stats(struct replay *r)
{
	size_t i;

	for (i = 0; i < r->n_requests; i++) {
		const struct request *q = &r->requests[i];

		if (q->resident)
			r->stats.already_resident++;
		if (!q->done)
			continue;
		r->stats.requests++;
		r->stats.bytes += q->bytes_done;
		r->stats.pages += pages_of(r, q);
		if (!r->files[q->file].used)
			r->stats.files++;
		r->files[q->file].used = 1;
	}
}

/* Returns 0, or -1 when nothing could be started. */
int run_requests(struct replay *r)
{
	int depth = r->opt.queue_depth, started;
	struct worker *workers = calloc((size_t)depth, sizeof(*workers));
	struct run run;
	int ret = -1;

	memset(&run, 0, sizeof(run));
	run.r = r;
	run.workers_left = depth;
	run.buffer_size = buffer_size(r);
	run.system_page = (size_t)sysconf(_SC_PAGESIZE);
	run.first_timestamp_us = r->n_requests ? r->requests[0].timestamp_us : 0;
	atomic_store(&run.cachestat_missing, getenv("PAGETRACE_NO_CACHESTAT") != NULL);
	pthread_mutex_init(&run.report_lock, NULL);
	if (!workers)
		goto cleanup;
	clock_gettime(CLOCK_MONOTONIC, &run.start);
	started = start_workers(&run, workers, depth);
	atomic_fetch_sub(&run.workers_left, depth - started);
	wait_for_workers(&run, workers, started);
	if (started == 0)
		goto cleanup;
	if (r->opt.mode == MODE_PREFETCH)
		wait_for_prefetch(&run);
	r->stats.elapsed_s = (double)(monotonic_ns() - ns_of(&run.start)) / 1e9;
	collect_stats(r);
	ret = 0;
cleanup:
	pthread_mutex_destroy(&run.report_lock);
	free(workers);
	return ret;
}
