// SPDX-License-Identifier: GPL-2.0
/*
 * startup-app: a small, deterministic stand-in for an application's startup.
 *
 * `startup-app --setup DIR` writes a few dozen files (libraries, data files,
 * configuration files; 4 MiB or so in all) with deterministic content.
 * `startup-app DIR` then reads them the way a real startup does: ELF-header
 * preads and scattered page faults through mmap for the "libraries",
 * scattered preads with holes for the data files, whole sequential reads
 * for the small configuration files, and a fixed amount of CPU work between
 * files. The file order and every offset come from a fixed seed, so every
 * run issues the same accesses; only the page cache decides what they cost.
 *
 * The startup harness (scripts/startup-bench) and the tests use it as a
 * workload whose I/O pattern is known in advance.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u
#define NFILES 40
#define SEED 0x5eed5eedULL
/* Default CPU work after each file, in mixing rounds (about 10 ms in all). */
#define DEFAULT_WORK 250000u
/* Pages of the largest file (288 KiB), for --list-pages' bookkeeping. */
#define MAX_FILE_PAGES 128

enum access_kind {
	ACCESS_MMAP,		/* header pread, then scattered faults (a library) */
	ACCESS_SCATTERED,	/* preads at scattered offsets, holes between */
	ACCESS_SEQUENTIAL,	/* read() front to back in 16 KiB chunks */
};

struct workload_file {
	char relpath[64];
	size_t size;
	enum access_kind kind;
};

struct options {
	const char *dir;
	int setup;
	int list_pages;
	unsigned work;
	double hold_s;
};

static const char *progname = "startup-app";

/* xorshift64*: tiny, deterministic, good enough to scatter offsets. */
static uint64_t next_random(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static size_t random_below(uint64_t *state, size_t bound)
{
	return bound ? (size_t)(next_random(state) % bound) : 0;
}

/*
 * The file set: names, sizes and access kinds all derive from SEED, so
 * --setup and a run agree without a manifest file.
 */
static void describe_files(struct workload_file files[NFILES])
{
	uint64_t rng = SEED;

	for (int i = 0; i < NFILES; i++) {
		struct workload_file *f = &files[i];

		/* Every size stays below MAX_FILE_PAGES pages. */
		if (i < 18) {
			snprintf(f->relpath, sizeof(f->relpath), "lib/lib%02d.so", i);
			f->size = 32 * 1024 + random_below(&rng, 256 * 1024);
			f->kind = ACCESS_MMAP;
		} else if (i < 32) {
			snprintf(f->relpath, sizeof(f->relpath), "share/data%02d.bin", i - 18);
			f->size = 16 * 1024 + random_below(&rng, 192 * 1024);
			f->kind = ACCESS_SCATTERED;
		} else {
			snprintf(f->relpath, sizeof(f->relpath), "etc/conf%02d.conf", i - 32);
			/* Not page multiples: real config files never are. */
			f->size = 512 + random_below(&rng, 24 * 1024);
			f->kind = ACCESS_SEQUENTIAL;
		}
	}
}

static void usage(FILE *out)
{
	fprintf(out,
"USAGE\n"
"  startup-app --setup DIR     write the workload's files under DIR\n"
"  startup-app [OPTIONS] DIR   read them like an application startup\n"
"\n"
"A deterministic stand-in for an application's startup: %d files\n"
"(lib/*.so read through mmap with scattered page faults, share/*.bin read\n"
"with scattered preads, etc/*.conf read sequentially), a fixed amount of CPU\n"
"work between files, the same accesses on every run. Prints one line,\n"
"'startup-app: ready: ...', when done, and exits 0.\n"
"\n"
"OPTIONS\n"
"  --setup          create DIR and the files (deterministic content), fsync them\n"
"  --work N         mixing rounds of CPU work after each file (default %u)\n"
"  --hold SECONDS   stay alive this long after printing 'ready' (for tests\n"
"                   of readiness markers and timeouts)\n"
"  --list-pages     also print every page it touches (each page once, as a\n"
"                   trace of disk reads would), in pagetrace trace format v1\n"
"                   (docs/trace-format.md), on stdout\n"
"  -h, --help       this text\n"
"\n"
"EXAMPLES\n"
"  startup-app --setup /var/tmp/sapp\n"
"  startup-app /var/tmp/sapp\n"
"  startup-app --list-pages /var/tmp/sapp > intended.log\n"
"  startup-bench --trace intended.log -n 5 -- startup-app /var/tmp/sapp\n",
		NFILES, DEFAULT_WORK);
}

static int parse_options(int argc, char **argv, struct options *opt)
{
	static const struct option longopts[] = {
		{ "setup", no_argument, NULL, 's' },
		{ "work", required_argument, NULL, 'w' },
		{ "hold", required_argument, NULL, 'H' },
		{ "list-pages", no_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	memset(opt, 0, sizeof(*opt));
	opt->work = DEFAULT_WORK;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			opt->setup = 1;
			break;
		case 'w':
			errno = 0;
			opt->work = (unsigned)strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg) {
				fprintf(stderr, "%s: --work: not a number: %s\n", progname, optarg);
				return -1;
			}
			break;
		case 'H':
			opt->hold_s = strtod(optarg, &end);
			if (*end || end == optarg || opt->hold_s < 0) {
				fprintf(stderr, "%s: --hold: not a number of seconds: %s\n",
					progname, optarg);
				return -1;
			}
			break;
		case 'l':
			opt->list_pages = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "%s: expected exactly one DIR (try --help)\n", progname);
		return -1;
	}
	opt->dir = argv[optind];
	return 0;
}

static int make_dir(const char *path)
{
	if (mkdir(path, 0755) && errno != EEXIST) {
		fprintf(stderr, "%s: %s: %s\n", progname, path, strerror(errno));
		return -1;
	}
	return 0;
}

static int write_all(int fd, const unsigned char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_workload_file(const char *dir, const struct workload_file *f, int index)
{
	char path[PATH_MAX];
	unsigned char *buf;
	uint64_t rng = SEED ^ ((uint64_t)(index + 1) << 32);
	int fd, ret = -1;

	snprintf(path, sizeof(path), "%s/%s", dir, f->relpath);
	buf = malloc(f->size);
	if (!buf) {
		fprintf(stderr, "%s: out of memory\n", progname);
		return -1;
	}
	for (size_t i = 0; i < f->size; i += 8) {
		uint64_t r = next_random(&rng);

		memcpy(buf + i, &r, f->size - i < 8 ? f->size - i : 8);
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	/* fsync so that the files start clean: eviction cannot drop dirty pages. */
	if (fd < 0 || write_all(fd, buf, f->size) || fsync(fd))
		fprintf(stderr, "%s: %s: %s\n", progname, path, strerror(errno));
	else
		ret = 0;
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

static int setup_workload(const char *dir, const struct workload_file files[NFILES])
{
	static const char *const subdirs[] = { "lib", "share", "etc" };
	char path[PATH_MAX];
	size_t total = 0;

	if (make_dir(dir))
		return -1;
	for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, subdirs[i]);
		if (make_dir(path))
			return -1;
	}
	for (int i = 0; i < NFILES; i++) {
		if (write_workload_file(dir, &files[i], i))
			return -1;
		total += files[i].size;
	}
	printf("%s: wrote %d files, %zu bytes, under %s\n", progname, NFILES, total, dir);
	return 0;
}

/* ---- the startup itself ---- */

struct run_state {
	const struct options *opt;
	uint64_t rng;		/* drives the access pattern */
	uint64_t checksum;	/* of every byte read: proves the reads happened */
	size_t bytes_read;
	char current_path[PATH_MAX];
	/* Pages of the current file already listed: a page comes from disk once. */
	unsigned char listed[MAX_FILE_PAGES];
};

static uint64_t now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

/* Print a path escaped as docs/trace-format.md says (octal \ooo). */
static void print_escaped_path(const char *path)
{
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		if (*p <= 0x20 || *p == 0x5c || *p == 0x7f)
			printf("\\%03o", *p);
		else
			putchar(*p);
	}
}

/*
 * With --list-pages, one record per page of [offset, offset + len) that was
 * not listed before: as in a real trace, a page is read from disk only once.
 */
static void note_access(struct run_state *st, size_t offset, size_t len)
{
	if (!st->opt->list_pages || len == 0)
		return;
	for (size_t page = offset / PAGE; page <= (offset + len - 1) / PAGE; page++) {
		if (st->listed[page])
			continue;
		st->listed[page] = 1;
		printf("%" PRIu64 " ", now_us());
		print_escaped_path(st->current_path);
		printf(" %zu\n", page * PAGE);
	}
}

static void absorb(struct run_state *st, const unsigned char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		st->checksum = (st->checksum ^ buf[i]) * 0x100000001B3ULL;
	st->bytes_read += len;
}

static int checked_pread(struct run_state *st, int fd, unsigned char *buf,
			 size_t len, size_t offset)
{
	ssize_t n = pread(fd, buf, len, (off_t)offset);

	if (n < 0) {
		fprintf(stderr, "%s: %s: %s\n", progname, st->current_path, strerror(errno));
		return -1;
	}
	note_access(st, offset, (size_t)n);
	absorb(st, buf, (size_t)n);
	return 0;
}

/* A library: the loader preads the ELF header, then code faults in here and there. */
static int access_mmap(struct run_state *st, int fd, size_t size)
{
	unsigned char header[832];
	size_t pages = (size + PAGE - 1) / PAGE;
	size_t touches = 2 + pages / 4;
	unsigned char *map;

	if (checked_pread(st, fd, header, sizeof(header), 0))
		return -1;
	map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		fprintf(stderr, "%s: %s: mmap: %s\n", progname, st->current_path, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < touches; i++) {
		size_t page = random_below(&st->rng, pages);
		size_t in_page = random_below(&st->rng, PAGE / 64) * 64;
		size_t offset = page * PAGE + in_page;

		if (offset >= size)
			offset = page * PAGE;
		note_access(st, offset, 1);
		absorb(st, map + offset, 1);
	}
	munmap(map, size);
	return 0;
}

/* A data file: a handful of small preads at scattered offsets, holes between. */
static int access_scattered(struct run_state *st, int fd, size_t size)
{
	unsigned char buf[16 * 1024];
	size_t reads = 3 + random_below(&st->rng, 6);

	for (size_t i = 0; i < reads; i++) {
		size_t len = 512 + random_below(&st->rng, sizeof(buf) - 512);
		size_t offset = random_below(&st->rng, size);

		if (offset + len > size)
			len = size - offset;
		if (checked_pread(st, fd, buf, len, offset))
			return -1;
	}
	return 0;
}

/* A configuration file: read() front to back. */
static int access_sequential(struct run_state *st, int fd)
{
	unsigned char buf[16 * 1024];
	size_t offset = 0;
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		note_access(st, offset, (size_t)n);
		absorb(st, buf, (size_t)n);
		offset += (size_t)n;
	}
	if (n < 0) {
		fprintf(stderr, "%s: %s: %s\n", progname, st->current_path, strerror(errno));
		return -1;
	}
	return 0;
}

/* The CPU part of a startup: fixed work, independent of the cache. */
static void cpu_work(struct run_state *st)
{
	uint64_t x = st->checksum | 1;

	for (unsigned i = 0; i < st->opt->work; i++)
		x = (x ^ (x >> 31)) * 0x9E3779B97F4A7C15ULL + i;
	/* Fold it in so that the compiler cannot drop the loop. */
	st->checksum ^= x & 1;
}

static int read_workload_file(struct run_state *st, const struct workload_file *f)
{
	struct stat sb;
	int fd, ret;

	snprintf(st->current_path, sizeof(st->current_path), "%s/%s", st->opt->dir, f->relpath);
	memset(st->listed, 0, sizeof(st->listed));
	fd = open(st->current_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb)) {
		fprintf(stderr, "%s: %s: %s (run '%s --setup %s' first)\n", progname,
			st->current_path, strerror(errno), progname, st->opt->dir);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if ((size_t)sb.st_size != f->size) {
		fprintf(stderr, "%s: %s: size %lld, expected %zu (run '%s --setup %s' again)\n",
			progname, st->current_path, (long long)sb.st_size, f->size,
			progname, st->opt->dir);
		close(fd);
		return -1;
	}
	switch (f->kind) {
	case ACCESS_MMAP:
		ret = access_mmap(st, fd, f->size);
		break;
	case ACCESS_SCATTERED:
		ret = access_scattered(st, fd, f->size);
		break;
	default:
		ret = access_sequential(st, fd);
		break;
	}
	close(fd);
	return ret;
}

static void print_trace_header(const struct options *opt)
{
	time_t now = time(NULL);
	char start[32];

	strftime(start, sizeof(start), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	printf("# pagetrace-format: 1\n# page-size: %u\n# clock: realtime-us\n"
	       "# columns: timestamp_us path offset\n"
	       "# command: startup-app %s\n# start: %s\n"
	       "# tracer: startup-app --list-pages (the pages it asks for, before readahead)\n",
	       PAGE, opt->dir, start);
}

static int run_startup(const struct options *opt, const struct workload_file files[NFILES])
{
	struct run_state st = { .opt = opt, .rng = SEED * 3 + 1, .checksum = 0xcbf29ce484222325ULL };
	int order[NFILES];

	/* A fixed shuffle: startups do not read files in directory order. */
	for (int i = 0; i < NFILES; i++)
		order[i] = i;
	for (int i = NFILES - 1; i > 0; i--) {
		int j = (int)random_below(&st.rng, (size_t)i + 1);
		int tmp = order[i];

		order[i] = order[j];
		order[j] = tmp;
	}
	if (opt->list_pages)
		print_trace_header(opt);
	for (int i = 0; i < NFILES; i++) {
		if (read_workload_file(&st, &files[order[i]]))
			return -1;
		cpu_work(&st);
	}
	printf("%sstartup-app: ready: %d files, %zu bytes read, checksum %016" PRIx64 "\n",
	       opt->list_pages ? "# " : "", NFILES, st.bytes_read, st.checksum);
	fflush(stdout);
	if (opt->hold_s > 0) {
		struct timespec hold = {
			.tv_sec = (time_t)opt->hold_s,
			.tv_nsec = (long)((opt->hold_s - (double)(time_t)opt->hold_s) * 1e9),
		};

		while (nanosleep(&hold, &hold) && errno == EINTR)
			;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct workload_file files[NFILES];
	struct options opt;

	if (parse_options(argc, argv, &opt))
		return 2;
	describe_files(files);
	if (opt.setup)
		return setup_workload(opt.dir, files) ? 1 : 0;
	return run_startup(&opt, files) ? 1 : 0;
}
