/* From a trace to the list of requests replay issues: loading the pages,
 * grouping, ordering (original, physical, file) and merging again. */
#include "replay.h"
#include "array.h"
#include "tracefile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *special_path_reason(const char *path, size_t len)
{
	if (len >= 10 && memcmp(path, "//deleted/", 10) == 0)
		return "special path: the file was deleted before it was read";
	if (len >= 10 && memcmp(path, "//unknown/", 10) == 0)
		return "special path: the file's name is unknown";
	if (len >= 6 && memcmp(path, "//dev/", 6) == 0)
		return "special path: the filesystem was not mounted";
	return "special path";
}

static int append_page(struct replay *r, size_t file,
		       const struct tracefile_record *rec)
{
	if (array_reserve(&r->pages, &r->pages_cap, r->n_pages + 1,
			  sizeof(*r->pages)) < 0)
		return -1;
	r->pages[r->n_pages].file = file;
	r->pages[r->n_pages].offset = rec->offset;
	r->pages[r->n_pages].timestamp_us = rec->timestamp_us;
	r->n_pages++;
	return 0;
}

static void line_message(struct replay *r, const struct tracefile *tf,
			 enum skip_reason reason, const char *why)
{
	char where[4096];

	snprintf(where, sizeof(where), "%s:%zu", tf->name, tf->line_no);
	skip_message(r, reason, 1, where, strlen(where), "%s", why);
}

static int is_special_path(const char *path, size_t len)
{
	return len >= 2 && path[0] == '/' && path[1] == '/';
}

/* Checks a well-formed read record against what replay can do with it.
 * Special paths are interned like files (so each is reported once) but
 * marked skipped. Returns -1 when out of memory. */
static int add_record(struct replay *r, const struct tracefile *tf,
		      const struct tracefile_record *rec)
{
	struct replay_file *f;
	long file;

	if (memchr(rec->path, '\0', rec->path_len)) {
		line_message(r, tf, SKIP_MALFORMED, "path contains a NUL byte");
		return 0;
	}
	if (rec->path_len == 0 || rec->path[0] != '/') {
		line_message(r, tf, SKIP_MALFORMED, "path is not absolute");
		return 0;
	}
	/* off_t is signed: leave room for the page itself. */
	if (rec->offset > (uint64_t)INT64_MAX - tf->page_size) {
		line_message(r, tf, SKIP_BAD_OFFSET, "offset is too large");
		return 0;
	}
	file = intern_file(r, rec->path, rec->path_len);
	if (file < 0)
		return -1;
	f = &r->files[file];
	if (is_special_path(rec->path, rec->path_len) && !f->special_reported) {
		f->special_reported = 1;
		f->state = FILE_SKIPPED;
		f->skip = SKIP_SPECIAL_PATH;
		skip_message(r, SKIP_SPECIAL_PATH, 0, rec->path, rec->path_len,
			     "%s", special_path_reason(rec->path,
						       rec->path_len));
	}
	return append_page(r, (size_t)file, rec);
}

/* --used: remembers the page of an access or map record. Records whose
 * path replay could not use anyway are left out silently: the read
 * records of the same page are reported. */
static int note_used(struct replay *r, const struct tracefile_record *rec)
{
	long file;

	if (memchr(rec->path, '\0', rec->path_len) || rec->path_len == 0 ||
	    rec->path[0] != '/' || is_special_path(rec->path, rec->path_len))
		return 0;
	file = intern_file(r, rec->path, rec->path_len);
	if (file < 0)
		return -1;
	if (array_reserve(&r->used, &r->used_cap, r->n_used + 1,
			  sizeof(*r->used)) < 0)
		return -1;
	r->used[r->n_used].file = (size_t)file;
	r->used[r->n_used].offset = rec->offset;
	r->used[r->n_used].timestamp_us = rec->timestamp_us;
	r->used[r->n_used].seq = r->n_used;
	r->used[r->n_used].read = 0;
	r->n_used++;
	return 0;
}

static int compare_used(const void *pa, const void *pb)
{
	const struct used_page *a = pa, *b = pb;

	if (a->file != b->file)
		return a->file < b->file ? -1 : 1;
	return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static int compare_first_access(const void *pa, const void *pb)
{
	const struct used_page *a = pa, *b = pb;

	if (a->timestamp_us != b->timestamp_us)
		return a->timestamp_us < b->timestamp_us ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* By page, and the first record of a page first. */
static int compare_used_earliest(const void *pa, const void *pb)
{
	int page = compare_used(pa, pb);

	return page ? page : compare_first_access(pa, pb);
}

/* One entry per page: its first access or map record. */
static void dedupe_used(struct replay *r)
{
	size_t i, kept = 0;

	qsort(r->used, r->n_used, sizeof(*r->used), compare_used_earliest);
	for (i = 0; i < r->n_used; i++)
		if (kept == 0 || compare_used(&r->used[kept - 1], &r->used[i]))
			r->used[kept++] = r->used[i];
	r->n_used = kept;
}

/* --used: keeps the read pages that also have an access or map record,
 * each once, in the order of their first access: the order the program
 * needs them in, which a prefetch running beside it must follow (iorap
 * did the same). The page takes the time of that access, for --timing. */
static void select_used_pages(struct replay *r)
{
	size_t i, kept = 0;

	dedupe_used(r);
	for (i = 0; i < r->n_pages; i++) {
		struct used_page key = {.file = r->pages[i].file,
					.offset = r->pages[i].offset};
		struct used_page *u = bsearch(&key, r->used, r->n_used,
					      sizeof(*r->used), compare_used);

		if (u)
			u->read = 1;
		else
			r->unused_pages++;
	}
	qsort(r->used, r->n_used, sizeof(*r->used), compare_first_access);
	for (i = 0; i < r->n_used; i++) {
		if (!r->used[i].read)
			continue;
		r->pages[kept].file = r->used[i].file;
		r->pages[kept].offset = r->used[i].offset;
		r->pages[kept].timestamp_us = r->used[i].timestamp_us;
		kept++;
	}
	r->n_pages = kept;
	/* A trace whose read pages were all unused has nothing to do, and
	 * that is no failure. */
	r->n_records -= r->unused_pages;
}

/* --used needs a trace that says which pages were used. */
static int check_used_recorded(struct replay *r, const struct tracefile *tf)
{
	unsigned used_kinds = 1u << TRACEFILE_KIND_ACCESS |
			      1u << TRACEFILE_KIND_MAP;

	if (tf->version >= 2 && (tf->kinds_declared & used_kinds) &&
	    r->kind_records[TRACEFILE_KIND_ACCESS] +
	    r->kind_records[TRACEFILE_KIND_MAP] > 0)
		return 0;
	errmsg(tf->name, "--used needs access records, and this trace "
	       "(format version %d) has none: record it with trace --used",
	       tf->version);
	r->fatal = 1;   /* said why: no "nothing could be replayed" */
	return -1;
}

static int take_record(struct replay *r, const struct tracefile *tf,
		       const struct tracefile_record *rec)
{
	r->kind_records[rec->kind]++;
	if (rec->kind == TRACEFILE_KIND_READ) {
		r->n_records++;
		return add_record(r, tf, rec);
	}
	return r->opt.used ? note_used(r, rec) : 0;
}

static int read_records(struct replay *r, struct tracefile *tf)
{
	const struct tracefile_record *rec;
	enum tracefile_status status;

	while (!r->fatal && (status = tracefile_next(tf, &rec)) !=
	       TRACEFILE_EOF) {
		if (status == TRACEFILE_ERROR) {
			errmsg(tf->name, "%s", tf->error);
			return -1;
		}
		if (status == TRACEFILE_MALFORMED) {
			r->n_records++;
			line_message(r, tf,
				     tracefile_defect_is_offset(tf->defect) ?
				     SKIP_BAD_OFFSET : SKIP_MALFORMED,
				     tf->error);
			continue;
		}
		if (take_record(r, tf, rec) < 0) {
			errmsg(NULL, "out of memory");
			return -1;
		}
	}
	r->page_size = tf->page_size;
	if (tf->trailer.present && tf->trailer.lost > 0)
		errmsg(tf->name, "warning: the trace is incomplete, the tracer "
		       "lost %llu events",
		       (unsigned long long)tf->trailer.lost);
	if (r->fatal || (r->opt.used && check_used_recorded(r, tf) < 0))
		return -1;
	return 0;
}

static void mark_files_with_pages(struct replay *r)
{
	size_t i;

	for (i = 0; i < r->n_pages; i++)
		r->files[r->pages[i].file].has_pages = 1;
}

int load_trace(struct replay *r)
{
	const char *name = r->opt.trace;
	int from_stdin = strcmp(name, "-") == 0;
	FILE *in = from_stdin ? stdin : fopen(name, "re");
	struct tracefile tf;
	int ret = -1;

	if (!in) {
		errmsg(name, "%s", errmsg_strerror(errno));
		return -1;
	}
	if (tracefile_init(&tf, in, from_stdin ? "<stdin>" : name) < 0) {
		errmsg(NULL, "out of memory");
		goto cleanup;
	}
	ret = read_records(r, &tf);
	tracefile_close(&tf);
	if (ret == 0 && r->opt.used)
		select_used_pages(r);
	if (ret == 0 && r->opt.first_reads && keep_first_reads(r) < 0) {
		errmsg(NULL, "out of memory");
		ret = -1;
	}
	mark_files_with_pages(r);
cleanup:
	if (!from_stdin)
		fclose(in);
	return ret;
}

static struct request *push_request(struct request **reqs, size_t *n,
				    size_t *cap)
{
	if (array_reserve(reqs, cap, *n + 1, sizeof(**reqs)) < 0)
		return NULL;
	memset(&(*reqs)[*n], 0, sizeof(**reqs));
	return &(*reqs)[(*n)++];
}

/* Whether a page is replayable; counts and reports it when not. */
static int page_is_usable(struct replay *r, const struct page *p)
{
	struct replay_file *f = &r->files[p->file];

	if (f->state != FILE_OPEN) {
		r->skipped[f->skip]++;
		return 0;
	}
	if (p->offset < f->size)
		return 1;
	if (f->short_reported) {
		r->skipped[SKIP_SHORT_FILE]++;
		return 0;
	}
	f->short_reported = 1;
	skip_message(r, SKIP_SHORT_FILE, 1, f->path, f->path_len,
		     "file is %llu bytes, shorter than traced offset %llu",
		     (unsigned long long)f->size,
		     (unsigned long long)p->offset);
	return 0;
}

/* Consecutive pages of one file, adjacent in the file too, make one
 * request (up to --max-request); the last one is clamped to the file. */
static int group_pages(struct replay *r)
{
	size_t i, cap = 0;
	struct request *cur = NULL;

	for (i = 0; i < r->n_pages && !r->fatal; i++) {
		const struct page *p = &r->pages[i];

		if (!page_is_usable(r, p))
			continue;
		if (cur && r->opt.grouped && cur->file == p->file &&
		    cur->offset + cur->length == p->offset &&
		    cur->length + r->page_size <= r->opt.max_request) {
			cur->length += r->page_size;
			continue;
		}
		cur = push_request(&r->requests, &r->n_requests, &cap);
		if (!cur)
			return -1;
		cur->file = p->file;
		cur->offset = p->offset;
		cur->length = r->page_size;
		cur->timestamp_us = p->timestamp_us;
	}
	for (i = 0; i < r->n_requests; i++) {
		struct request *q = &r->requests[i];
		uint64_t size = r->files[q->file].size;

		if (q->offset + q->length > size)
			q->length = size - q->offset;
	}
	return 0;
}

static void locate(const struct replay *r, struct request *q)
{
	const struct replay_file *f = &r->files[q->file];
	uint64_t last = physical_of(f, q->offset + q->length - 1);

	q->physical = physical_of(f, q->offset);
	if (last != PHYSICAL_UNKNOWN)
		q->physical_end = last + 1;
	else if (q->physical != PHYSICAL_UNKNOWN)
		q->physical_end = q->physical + q->length;
	else
		q->physical_end = PHYSICAL_UNKNOWN;
}

/* For --sorted: cuts requests where they cross from one extent (or hole)
 * to the next, so each piece has one physical position. */
static int split_at_extents(struct replay *r)
{
	struct request *pieces = NULL;
	size_t n = 0, cap = 0, i;

	for (i = 0; i < r->n_requests; i++) {
		const struct request *q = &r->requests[i];
		const struct replay_file *f = &r->files[q->file];
		uint64_t off = q->offset, end = q->offset + q->length;

		while (off < end) {
			uint64_t piece_end = extent_end(f, off);
			struct request *piece = push_request(&pieces, &n, &cap);

			if (!piece) {
				free(pieces);
				return -1;
			}
			*piece = *q;
			piece->offset = off;
			piece->length = (piece_end < end ? piece_end : end) - off;
			off += piece->length;
		}
	}
	free(r->requests);
	r->requests = pieces;
	r->n_requests = n;
	return 0;
}

static int compare_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int compare_by_file(const struct request *a, const struct request *b,
			   const struct replay *r)
{
	const struct replay_file *fa = &r->files[a->file];
	const struct replay_file *fb = &r->files[b->file];
	size_t len = fa->path_len < fb->path_len ? fa->path_len : fb->path_len;
	int c;

	if (a->file != b->file) {
		c = memcmp(fa->path, fb->path, len);
		if (c)
			return c;
		return compare_u64(fa->path_len, fb->path_len);
	}
	return compare_u64(a->offset, b->offset);
}

/* qsort is not stable: ties keep trace order through timestamp_us, which
 * group_pages set from the trace, and then through the file offset. */
static int compare_file_order(const void *pa, const void *pb, void *arg)
{
	const struct request *a = pa, *b = pb;
	int c = compare_by_file(a, b, arg);

	return c ? c : compare_u64(a->timestamp_us, b->timestamp_us);
}

/* Per device (in order of first appearance), located pieces by physical
 * position, then pieces with no position (FIEMAP failed, holes) by file. */
static int compare_disk_order(const void *pa, const void *pb, void *arg)
{
	const struct request *a = pa, *b = pb;
	const struct replay *r = arg;
	int c = compare_u64(r->files[a->file].device_rank,
			    r->files[b->file].device_rank);
	int a_unknown = a->physical == PHYSICAL_UNKNOWN;
	int b_unknown = b->physical == PHYSICAL_UNKNOWN;

	if (c)
		return c;
	if (a_unknown != b_unknown)
		return a_unknown - b_unknown;
	if (!a_unknown && a->physical != b->physical)
		return compare_u64(a->physical, b->physical);
	return compare_file_order(pa, pb, arg);
}

static int continues_on_disk(const struct request *prev,
			     const struct request *next, int by_physical)
{
	if (!by_physical)
		return 1;
	if (prev->physical == PHYSICAL_UNKNOWN ||
	    next->physical == PHYSICAL_UNKNOWN)
		return prev->physical == next->physical;
	return prev->physical + (next->offset - prev->offset) == next->physical;
}

/* After sorting: pieces of one file that now follow each other, in the file
 * and (for --sorted) on disk, become one request again, up to
 * --max-request. Ranges read twice in the trace are read once. */
static void merge_adjacent(struct replay *r, int by_physical)
{
	size_t i, out = 0;

	for (i = 0; i < r->n_requests; i++) {
		struct request next = r->requests[i];
		struct request *prev = out ? &r->requests[out - 1] : NULL;
		uint64_t prev_end = prev ? prev->offset + prev->length : 0;

		if (prev && prev->file == next.file &&
		    next.offset <= prev_end &&
		    continues_on_disk(prev, &next, by_physical)) {
			uint64_t overlap = prev_end - next.offset;

			if (next.length <= overlap)
				continue;
			next.offset += overlap;
			next.length -= overlap;
			if (next.physical != PHYSICAL_UNKNOWN)
				next.physical += overlap;
			if (r->opt.grouped &&
			    prev->length + next.length <= r->opt.max_request) {
				prev->length += next.length;
				continue;
			}
		}
		r->requests[out++] = next;
	}
	r->n_requests = out;
}

static void locate_all(struct replay *r)
{
	size_t i;

	for (i = 0; i < r->n_requests; i++)
		locate(r, &r->requests[i]);
}

int build_plan(struct replay *r)
{
	if (group_pages(r) < 0)
		return -1;
	if (r->opt.order == ORDER_SORTED && r->opt.grouped &&
	    split_at_extents(r) < 0)
		return -1;
	locate_all(r);
	if (r->opt.order == ORDER_SORTED)
		qsort_r(r->requests, r->n_requests, sizeof(*r->requests),
			compare_disk_order, r);
	else if (r->opt.order == ORDER_FILE)
		qsort_r(r->requests, r->n_requests, sizeof(*r->requests),
			compare_file_order, r);
	if (r->opt.order != ORDER_ORIGINAL && r->opt.grouped) {
		merge_adjacent(r, r->opt.order == ORDER_SORTED);
		locate_all(r);
	}
	return 0;
}

struct head {
	int used;
	size_t file;
	uint64_t end;
};

static int any_located(const struct replay *r)
{
	size_t i;

	for (i = 0; i < r->n_requests; i++)
		if (r->requests[i].done &&
		    r->requests[i].physical != PHYSICAL_UNKNOWN)
			return 1;
	return 0;
}

static void count_jump(struct replay *r, struct head *h, size_t file,
		       uint64_t start, uint64_t end, int comparable)
{
	if (h->used && (!comparable || start != h->end))
		r->stats.seeks++;
	if (h->used && comparable)
		r->stats.seek_distance += start > h->end ? start - h->end :
							   h->end - start;
	h->used = 1;
	h->file = file;
	h->end = end;
}

/* A seek is a request that does not start where the previous one ended
 * (docs/data-formats.md, and the same rule as analysis/pagetrace/metrics.py).
 * In physical space, "previous" is the previous located request on the
 * same device (each device has its own head) and unlocated requests are
 * left out; the end of a request that spans extents is where its last byte
 * is. When nothing is located, file-offset space: a jump to another file
 * is a seek of unknown distance, which adds nothing to the total. */
void count_seeks(struct replay *r)
{
	int physical = any_located(r);
	struct head *heads = calloc(r->n_files ? r->n_files : 1,
				    sizeof(*heads));
	size_t i;

	if (!heads)
		return;
	for (i = 0; i < r->n_requests; i++) {
		const struct request *q = &r->requests[i];
		struct head *h;

		if (!q->done)
			continue;
		if (!physical) {
			count_jump(r, heads, q->file, q->offset,
				   q->offset + q->length,
				   heads->file == q->file);
			continue;
		}
		if (q->physical == PHYSICAL_UNKNOWN)
			continue;
		h = &heads[r->files[q->file].device_rank];
		count_jump(r, h, q->file, q->physical, q->physical_end, 1);
	}
	free(heads);
}
