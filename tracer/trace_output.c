// SPDX-License-Identifier: GPL-2.0
/*
 * trace's output: the header, the records (read, access, map; with -x the
 * extra columns), the trailer, the summary on stderr, and the clock that
 * turns kernel timestamps into wall-clock microseconds. Owns `run`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include "bpf_cost.h"
#include "paths.h"
#include "trace_events.h"
#include "errmsg.h"
#include "trace_run.h"

struct run_state run = { .page_size = 4096 };

static const char *const cause_names[] = {
	[CAUSE_UNKNOWN] = "-", [CAUSE_READ] = "read", [CAUSE_SYNC_RA] = "sync_ra",
	[CAUSE_ASYNC_RA] = "async_ra", [CAUSE_FORCED_RA] = "forced_ra",
	[CAUSE_FAULT] = "fault", [CAUSE_METADATA] = "metadata",
};

unsigned long long clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void measure_clock_offset(void)
{
	unsigned long long before = clock_ns(CLOCK_MONOTONIC);
	unsigned long long real = clock_ns(CLOCK_REALTIME);
	unsigned long long after = clock_ns(CLOCK_MONOTONIC);

	run.realtime_offset_ns = (long long)real - (long long)(before + (after - before) / 2);
	run.start_mono_ns = after;
}

static void print_command(FILE *out)
{
	if (opts.command) {
		escape_puts(out, opts.command);
	} else if (opts.argv) {
		for (char **a = opts.argv; *a; a++) {
			if (a != opts.argv)
				fputs("\\040", out);	/* keep the header one token per word */
			escape_puts(out, *a);
		}
	} else if (opts.target.pid) {
		fprintf(out, "pid\\040%d", opts.target.pid);
	} else if (opts.target.container) {
		fputs("container\\040", out);
		escape_puts(out, opts.target.container);
	} else if (opts.target.cgroup_path) {
		fputs("cgroup\\040", out);
		escape_puts(out, opts.target.cgroup.path);
	} else {
		fputs("system-wide", out);
	}
}

void write_header(FILE *out)
{
	char stamp[64], host[256] = "";
	struct timespec now;
	struct utsname uts = {};
	struct tm tm;

	uname(&uts);
	gethostname(host, sizeof(host) - 1);
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(stamp + strlen(stamp), sizeof(stamp) - strlen(stamp), ".%06ldZ",
		 now.tv_nsec / 1000);
	fprintf(out, "# pagetrace-format: %d\n# page-size: %ld\n# clock: realtime-us\n",
		opts.used ? 2 : 1, run.page_size);
	fprintf(out, "# columns: timestamp_us path offset%s%s\n", opts.used ? " kind" : "",
		opts.extra ? " pid tid comm cause dev ino" : "");
	if (opts.used)
		fputs("# records: read access map\n", out);
	if (opts.target.container)
		fprintf(out, "# paths: %s\n", opts.paths_container ? "container" : "host");
	fputs("# command: ", out);
	print_command(out);
	fprintf(out, "\n# start: %s\n# kernel: %s\n# host: %s\n", stamp, uts.release, host);
	fprintf(out, "# tracer: %s %s (block:block_bio_queue, %s, %s%s)\n", TOOL, TRACE_VERSION,
		run.attach_name, run.walk_name, opts.used ? ", used" : "");
	fflush(out);
}

/* The path of a file with a read record; counts it in files= once. */
static const char *path_of(const struct file_id *id)
{
	struct known_file *slot = known_file(id);

	if (!slot)
		return "//unknown";
	if (first_read_of(slot))
		files.files_read++;
	return slot->path;
}

/* The path of a file with access or map records: files= counts reads only. */
static const char *path_of_marked(const struct file_id *id)
{
	struct known_file *slot = known_file(id);

	return slot ? slot->path : "//unknown";
}

/*
 * One record's "timestamp path offset": the hot loop of the user side (one
 * call per page), so no fprintf format to parse each time.
 */
static void put_u64(unsigned long long value)
{
	char digits[20];
	int n = 0;

	do {
		digits[n++] = (char)('0' + value % 10);
		value /= 10;
	} while (value);
	while (n)
		putc_unlocked(digits[--n], run.out);
}

static void put_record(unsigned long long ts_us, const char *path, unsigned long long offset)
{
	put_u64(ts_us);
	putc_unlocked(' ', run.out);
	fputs_unlocked(path, run.out);
	putc_unlocked(' ', run.out);
	put_u64(offset);
}

static unsigned long long realtime_us(__u64 mono_ns)
{
	return ((long long)mono_ns + run.realtime_offset_ns) / 1000;
}

/* The -x columns: pid tid comm cause dev ino. */
static void write_extra(__u32 pid, __u32 tid, const char *raw_comm, const char *cause,
			const struct file_id *file)
{
	char comm[TASK_COMM_LEN + 1] = {};

	memcpy(comm, raw_comm, TASK_COMM_LEN);
	fprintf(run.out, " %u %u ", pid, tid);
	escape_puts(run.out, comm[0] ? comm : "-");
	fprintf(run.out, " %s %u:%u %llu", cause, file->dev >> 20, file->dev & 0xfffff,
		(unsigned long long)file->ino);
}

/* The device node of a metadata record; not counted in files=. */
static const char *path_of_device(__u32 dev)
{
	struct known_file *slot = known_device(dev);

	return slot ? slot->path : "//unknown";
}

static void write_pages(const struct pages_event *e)
{
	unsigned long long ts_us = realtime_us(e->ts_ns);
	bool metadata = e->cause == CAUSE_METADATA;
	const char *path = metadata ? path_of_device(e->file.dev) : path_of(&e->file);
	unsigned long long page_bytes = 1ULL << e->page_shift;
	const char *cause = e->cause < sizeof(cause_names) / sizeof(*cause_names) ?
			    cause_names[e->cause] : "-";

	for (__u32 i = 0; i < e->nr_pages; i++) {
		put_record(ts_us, path, (e->index + i) * page_bytes);
		if (opts.used)
			fputs(" read", run.out);
		if (opts.extra)
			write_extra(e->pid, e->tid, e->comm, cause, &e->file);
		putc('\n', run.out);
	}
	run.pages += e->nr_pages;
	if (run.program_known && e->file.dev == run.program_dev &&
	    e->file.ino == run.program_ino)
		run.program_read = true;
	if (metadata)
		run.metadata_pages += e->nr_pages;
	run.end_mono_ns = e->ts_ns;
}

/* --used: one access or map record per page set in the chunk's mask. */
static void write_marks(const struct marks_event *e)
{
	unsigned long long ts_us = realtime_us(e->ts_ns);
	const char *path = path_of_marked(&e->file);
	unsigned long long page_bytes = 1ULL << e->page_shift;
	const char *kind = e->record == RECORD_MAP ? "map" : "access";
	const char *cause = e->how == ACCESS_BY_READ ? "read" : "fault";

	for (__u32 bit = 0; bit < 64; bit++) {
		if (!(e->mask & (1ULL << bit)))
			continue;
		put_record(ts_us, path, (e->base + bit) * page_bytes);
		putc_unlocked(' ', run.out);
		fputs_unlocked(kind, run.out);
		if (opts.extra)
			write_extra(e->pid, e->tid, e->comm, cause, &e->file);
		putc('\n', run.out);
		if (e->record == RECORD_MAP)
			run.mapped++;
		else
			run.accessed++;
	}
}

int handle_event(void *ctx, void *data, size_t size)
{
	__u32 kind = size >= sizeof(__u32) ? *(__u32 *)data : 0;

	(void)ctx;
	if (kind == EVENT_PATH && size >= sizeof(struct path_event)) {
		const struct path_event *e = data;
		char *path = resolve_path(e);

		if (path)
			remember_file(&e->file, path);
	} else if (kind == EVENT_PAGES && size >= sizeof(struct pages_event)) {
		write_pages(data);
		run.bios++;
	} else if (kind == EVENT_MARKS && size >= sizeof(struct marks_event)) {
		write_marks(data);
	}
	if (ferror(run.out)) {
		run.write_failed = true;
		return -EIO;	/* stops ring_buffer__poll */
	}
	return 0;
}

/* The programs' run time, one comment line each (docs/trace-format.md, "Trailer"). */
static void write_cost(const struct bpf_cost *cost)
{
	if (!cost->measured) {
		fprintf(run.out, "# bpf: not measured (%s)\n", cost->why_not);
		return;
	}
	for (int i = 0; i < cost->n; i++)
		fprintf(run.out, "# bpf: %s runs=%llu run_time_ns=%llu missed=%llu\n",
			cost->program[i].name, cost->program[i].runs, cost->program[i].ns,
			cost->program[i].missed);
}

void write_trailer(const struct lost_counts *lost, unsigned long long duration_us,
		   const struct bpf_cost *cost)
{
	write_cost(cost);
	fprintf(run.out, "# end: pages=%llu bytes=%llu files=%zu duration_us=%llu lost=%llu "
		"metadata=%llu", run.pages, run.pages * run.page_size, files.files_read, duration_us,
		lost->total, run.metadata_pages);
	if (opts.used)
		fprintf(run.out, " accessed=%llu mapped=%llu", run.accessed, run.mapped);
	if (cost->measured)
		fprintf(run.out, " bpf_ns=%llu bpf_runs=%llu", cost->ns, cost->runs);
	fprintf(run.out, " bpf_missed=%llu", cost->missed);
	putc('\n', run.out);
	fflush(run.out);
}

/* Filesystems whose inodes' s_dev is the st_dev stat() gives. */
static bool plain_block_fs(const char *path)
{
	struct statfs fs;

	return statfs(path, &fs) == 0 &&
	       (fs.f_type == 0xEF53 /* ext2/3/4 */ || fs.f_type == 0x58465342 /* xfs */ ||
		fs.f_type == (__typeof__(fs.f_type))0xF2F52010 /* f2fs */);
}

/* The file execvp() would run for NAME; false when not found. */
static bool find_program(const char *name, char *path, size_t len)
{
	const char *dirs = getenv("PATH"), *end;

	if (strchr(name, '/'))
		return snprintf(path, len, "%s", name) < (int)len;
	for (dirs = dirs ? dirs : "/usr/bin:/bin"; *dirs; dirs = *end ? end + 1 : end) {
		end = strchrnul(dirs, ':');
		if (snprintf(path, len, "%.*s/%s", (int)(end - dirs), dirs, name) < (int)len &&
		    access(path, X_OK) == 0)
			return true;
	}
	return false;
}

void note_program(const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	if (!find_program(name, path, sizeof(path)) || stat(path, &st) ||
	    !S_ISREG(st.st_mode) || !plain_block_fs(path))
		return;
	run.program_dev = major(st.st_dev) << 20 | minor(st.st_dev);
	run.program_ino = st.st_ino;
	run.program_known = true;
}

/*
 * A warm start says so. With --used, a page accessed but never read was a
 * cache hit, and at least accessed - pages of the accesses were (each read
 * page can account for one access at most): most of them is warm. Without,
 * the program trace started had none of its pages read: it was cached.
 */
static void say_if_warm(void)
{
	unsigned long long file_pages = run.pages - run.metadata_pages;
	bool hits = opts.used && run.accessed > 0 &&
		    run.accessed > file_pages && (run.accessed - file_pages) * 2 > run.accessed;

	if (!hits && !(run.program_known && !run.program_read))
		return;
	if (hits)
		fprintf(stderr, "%s: warm: at least %llu of %llu accesses (%.0f%%) were cache hits",
			TOOL, run.accessed - file_pages, run.accessed,
			100.0 * (run.accessed - file_pages) / run.accessed);
	else
		fprintf(stderr, "%s: warm: the program started was already cached (none of its "
			"pages read)", TOOL);
	fprintf(stderr, "; trace a cold start with: sudo pagetrace trace --drop-caches%s%s ...\n",
		opts.used ? " --used" : "", opts.extra ? " -x" : "");
}

void report(const struct lost_counts *lost, unsigned long long duration_us,
	    const struct bpf_cost *cost)
{
	double seconds = duration_us / 1e6;

	if (lost->total)
		fprintf(stderr, "%s: %llu events LOST (ring buffer full: %llu, names: %llu, "
			"bios too long: %llu, untracked children: %llu, page state map full: %llu, "
			"ranges too long: %llu, faults unresolved: %llu); the trace is incomplete%s\n",
			TOOL, lost->total, lost->ringbuf, lost->path, lost->long_bio, lost->tasks,
			lost->page_state, lost->long_range, lost->faults,
			lost->ringbuf || lost->path ? ": try a larger --ringbuf-size" : "");
	if (opts.quiet)
		return;
	fprintf(stderr, "%s: %llu pages (%llu metadata), %.1f MiB, %zu files, %.2f s, "
		"%.0f events/s, %llu lost\n", TOOL, run.pages, run.metadata_pages,
		run.pages * (double)run.page_size / (1 << 20), files.files_read,
		seconds, seconds > 0 ? run.bios / seconds : 0.0, lost->total);
	cost_print(stderr, TOOL, cost, opts.verbose);
	say_if_warm();
	if (files.forgotten)
		fprintf(stderr, "%s: %llu file names not used lately were forgotten to bound memory "
			"(the kernel sent again those read later); nothing lost\n", TOOL,
			files.forgotten);
}

int open_output(void)
{
	int fd;

	if (!opts.output) {
		run.out = stdout;
	} else {
		fd = open(opts.output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			return errmsg(opts.output, "%s", errmsg_strerror(errno)), -1;
		run.out = fdopen(fd, "w");
		if (!run.out)
			return close(fd), -1;
		/* Hand the file to the sudo caller, who will want to read and delete it. */
		if (getuid() == 0 && getenv("SUDO_UID") && getenv("SUDO_GID") &&
		    fchown(fd, (uid_t)atol(getenv("SUDO_UID")), (gid_t)atol(getenv("SUDO_GID"))))
			errmsg(opts.output, "chown: %s", errmsg_strerror(errno));
	}
	setvbuf(run.out, NULL, _IOFBF, 1 << 20);
	return 0;
}

