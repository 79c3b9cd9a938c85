// SPDX-License-Identifier: GPL-2.0
/*
 * trace: record every file page a command (and its children) caused to be
 * read from storage, one line per page: "timestamp_us path offset".
 * The output format is specified in docs/trace-format.md.
 *
 * Flow: parse options -> check kernel features -> open skeleton -> set
 * rodata -> load (tp_btf, else raw_tp) -> attach -> start/adopt the target
 * -> poll the ring buffer until the target exits or a signal -> trailer.
 */
#define _GNU_SOURCE
#include <argp.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include "trace.h"
#include "trace.skel.h"

#define TOOL "trace"
#define TRACE_VERSION "0.1.0"
/* trace's own exit status when the traced command succeeded but events were lost. */
#define EXIT_LOST 3

/* ------------------------------------------------------------------ */
/* Options                                                            */

enum attach_mode { ATTACH_AUTO, ATTACH_TP_BTF, ATTACH_RAW_TP };

static struct options {
	char *command;		/* -c: run through /bin/sh -c */
	char **argv;		/* or: -- CMD ARGS... */
	pid_t pid;		/* -p */
	bool all;		/* -a */
	bool no_children;
	bool extra;		/* -x */
	bool allow_lost;
	bool quiet;
	bool verbose;
	const char *output;	/* -o */
	const char *user;	/* -u */
	const char *btf_path;	/* --btf: kernel BTF from a file */
	double duration;	/* -d seconds, 0 = until the target ends */
	unsigned long ringbuf_bytes;
	enum attach_mode attach;
	bool no_bpf_loop;	/* test the pre-5.17 walk on any kernel */
} opts = {
	.ringbuf_bytes = 16UL << 20,
};

const char *argp_program_version = TOOL " " TRACE_VERSION;
/* Bad options exit 2, as documented, not argp's default 64. */
error_t argp_err_exit_status = 2;
const char *argp_program_bug_address = "<https://github.com/pagetrace/pagetrace/issues>";
static const char doc[] =
"Record every file page that a command, and every process it starts, caused\n"
"to be read from storage. One line per page: timestamp_us path offset\n"
"(docs/trace-format.md). Needs root, or CAP_BPF and CAP_PERFMON.\n"
"\n"
"USAGE: trace [OPTIONS] -c 'CMD ARGS' | -- CMD ARGS | -p PID | -a\n"
"\n"
"EXAMPLES:\n"
"  sudo trace -c 'firefox-esr --headless --screenshot /tmp/x.png' > reads.log\n"
"  sudo trace -o reads.log -- ls -l /usr/lib       # run ls without a shell\n"
"  sudo trace -x -c 'make -j2' > build.log   # + pid tid comm cause dev ino\n"
"  sudo trace -p 1234 -d 10 > reads.log            # a running process, 10 s\n"
"  sudo trace -a -d 5 > system.log                 # every process, 5 s\n"
"\n"
"When the trace goes to stdout, the command's stdout is sent to stderr so\n"
"that the two never mix; with -o the command's stdout is left alone.\n"
"\n"
"Exit status: the traced command's status (128+N if killed by signal N);\n"
"3 if it succeeded but events were lost and --allow-lost was not given;\n"
"1 if trace itself failed.\n"
"\n"
"OPTIONS:";

enum {
	OPT_NO_CHILDREN = 0x100,
	OPT_ALLOW_LOST,
	OPT_RINGBUF,
	OPT_ATTACH,
	OPT_BTF,
	OPT_NO_BPF_LOOP,
};

static const struct argp_option argp_options[] = {
	{ "command", 'c', "CMD", 0, "Run CMD with /bin/sh -c and trace it and its descendants", 0 },
	{ "pid", 'p', "PID", 0, "Trace a running process (all its threads) and its future children", 0 },
	{ "all", 'a', NULL, 0, "Trace every process on the system", 0 },
	{ "no-children", OPT_NO_CHILDREN, NULL, 0, "Do not follow child processes (threads are still followed)", 0 },
	{ "output", 'o', "FILE", 0, "Write the trace to FILE instead of stdout", 0 },
	{ "extra", 'x', NULL, 0, "Add the columns pid tid comm cause dev ino", 0 },
	{ "user", 'u', "USER", 0, "Run CMD as USER (default under sudo: the invoking user)", 0 },
	{ "duration", 'd', "SECONDS", 0, "Stop after SECONDS (needed with -a unless -c is given)", 0 },
	{ "allow-lost", OPT_ALLOW_LOST, NULL, 0, "Exit 0 even if events were lost (they are still reported)", 0 },
	{ "ringbuf-size", OPT_RINGBUF, "BYTES", 0, "Ring buffer size, power of two, K/M suffix (default 16M)", 0 },
	{ "attach", OPT_ATTACH, "MODE", 0, "auto (default), tp_btf or raw_tp", 0 },
	{ "btf", OPT_BTF, "FILE", 0, "Kernel BTF to use instead of /sys/kernel/btf/vmlinux "
	  "(for kernels built without it, e.g. from BTFHub)", 0 },
	{ "no-bpf-loop", OPT_NO_BPF_LOOP, NULL, OPTION_HIDDEN,
	  "Walk bios as on kernels without bpf_loop (for tests)", 0 },
	{ "quiet", 'q', NULL, 0, "No summary on stderr", 0 },
	{ "verbose", 'v', NULL, 0, "Show libbpf's messages", 0 },
	{},
};

static int parse_size(const char *text, unsigned long *out)
{
	char *end;
	unsigned long value;

	errno = 0;
	value = strtoul(text, &end, 10);
	if (errno || end == text)
		return -1;
	if (*end == 'K' || *end == 'k')
		value <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		value <<= 20, end++;
	if (*end)
		return -1;
	*out = value;
	return 0;
}

static error_t parse_opt(int key, char *arg, struct argp_state *state)
{
	char *end;

	switch (key) {
	case 'c': opts.command = arg; break;
	case 'a': opts.all = true; break;
	case 'x': opts.extra = true; break;
	case 'o': opts.output = arg; break;
	case 'u': opts.user = arg; break;
	case 'q': opts.quiet = true; break;
	case 'v': opts.verbose = true; break;
	case OPT_NO_CHILDREN: opts.no_children = true; break;
	case OPT_ALLOW_LOST: opts.allow_lost = true; break;
	case OPT_BTF: opts.btf_path = arg; break;
	case OPT_NO_BPF_LOOP: opts.no_bpf_loop = true; break;
	case 'p':
		errno = 0;
		opts.pid = strtol(arg, &end, 10);
		if (errno || *end || opts.pid <= 0)
			argp_error(state, "invalid PID: %s", arg);
		break;
	case 'd':
		opts.duration = strtod(arg, &end);
		if (*end || opts.duration <= 0)
			argp_error(state, "invalid duration: %s", arg);
		break;
	case OPT_RINGBUF:
		if (parse_size(arg, &opts.ringbuf_bytes) ||
		    opts.ringbuf_bytes < 4096 || opts.ringbuf_bytes > (1UL << 30) ||
		    (opts.ringbuf_bytes & (opts.ringbuf_bytes - 1)))
			argp_error(state, "--ringbuf-size must be a power of two from 4K to 1G: %s", arg);
		break;
	case OPT_ATTACH:
		if (!strcmp(arg, "auto"))
			opts.attach = ATTACH_AUTO;
		else if (!strcmp(arg, "tp_btf"))
			opts.attach = ATTACH_TP_BTF;
		else if (!strcmp(arg, "raw_tp"))
			opts.attach = ATTACH_RAW_TP;
		else
			argp_error(state, "--attach takes auto, tp_btf or raw_tp: %s", arg);
		break;
	case ARGP_KEY_ARGS:
		opts.argv = state->argv + state->next;
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* Conflicts are checked once every option is known. */
static int check_options(void)
{
	int targets = (opts.command != NULL) + (opts.argv != NULL) + (opts.pid != 0);

	if (opts.command && opts.argv)
		return fprintf(stderr, "%s: give the command with -c or after --, not both\n", TOOL), -1;
	if (targets > 1)
		return fprintf(stderr, "%s: -c/--, and -p are exclusive\n", TOOL), -1;
	if (targets == 0 && !opts.all)
		return fprintf(stderr, "%s: nothing to trace: give -c CMD, -- CMD, -p PID or -a (see --help)\n", TOOL), -1;
	if (opts.all && opts.pid)
		return fprintf(stderr, "%s: -a and -p are exclusive\n", TOOL), -1;
	if (opts.all && opts.no_children)
		return fprintf(stderr, "%s: --no-children makes no sense with -a\n", TOOL), -1;
	if (opts.all && !targets && opts.duration == 0)
		fprintf(stderr, "%s: tracing every process until Ctrl-C (or give -d SECONDS)\n", TOOL);
	if (opts.user && !(opts.command || opts.argv))
		return fprintf(stderr, "%s: -u only applies to a command run by trace\n", TOOL), -1;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Path escaping and the mount table                                  */

/* Escape as docs/trace-format.md says: \ooo for space, controls, DEL, backslash. */
static void write_escaped(FILE *out, const char *text)
{
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		if (*p <= 0x20 || *p == 0x7f || *p == '\\')
			fprintf(out, "\\%03o", *p);
		else
			putc(*p, out);
	}
}

/* Undo /proc/self/mountinfo's octal escapes in place. */
static void unescape_octal(char *text)
{
	char *out = text;

	for (char *in = text; *in; in++) {
		if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' &&
		    in[2] >= '0' && in[2] <= '7' && in[3] >= '0' && in[3] <= '7') {
			*out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
			in += 3;
		} else {
			*out++ = *in;
		}
	}
	*out = '\0';
}

struct mount_entry {
	unsigned int major, minor;
	char *root;		/* the filesystem directory mounted here */
	char *mount_point;
};

static struct mount_table {
	struct mount_entry *entries;
	size_t count;
} mounts;

static void free_mounts(void)
{
	for (size_t i = 0; i < mounts.count; i++) {
		free(mounts.entries[i].root);
		free(mounts.entries[i].mount_point);
	}
	free(mounts.entries);
	mounts.entries = NULL;
	mounts.count = 0;
}

static int load_mounts(void)
{
	FILE *file = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, root[PATH_MAX], point[PATH_MAX];
	size_t cap = 0, allocated = 0;
	unsigned int major, minor;

	if (!file)
		return fprintf(stderr, "%s: /proc/self/mountinfo: %s\n", TOOL, strerror(errno)), -1;
	free_mounts();
	while (getline(&line, &cap, file) > 0) {
		if (sscanf(line, "%*d %*d %u:%u %4095s %4095s", &major, &minor, root, point) != 4)
			continue;
		if (mounts.count == allocated) {
			allocated = allocated ? allocated * 2 : 64;
			mounts.entries = realloc(mounts.entries, allocated * sizeof(*mounts.entries));
			if (!mounts.entries)
				return fprintf(stderr, "%s: out of memory\n", TOOL), fclose(file), -1;
		}
		unescape_octal(root);
		unescape_octal(point);
		mounts.entries[mounts.count++] = (struct mount_entry){
			major, minor, strdup(root), strdup(point) };
	}
	free(line);
	fclose(file);
	return 0;
}

/* @rel is relative to the filesystem root; does mount @m show it, and where? */
static bool mount_shows(const struct mount_entry *m, const char *rel, const char **rest)
{
	size_t len = strlen(m->root);

	if (!strcmp(m->root, "/")) {
		*rest = rel;
		return true;
	}
	if (strncmp(rel, m->root, len) || (rel[len] != '/' && rel[len] != '\0'))
		return false;
	*rest = rel + len;
	return true;
}

static const struct mount_entry *find_mount(unsigned int major, unsigned int minor,
					    const char *rel, const char **rest)
{
	for (size_t i = 0; i < mounts.count; i++) {
		const struct mount_entry *m = &mounts.entries[i];

		if (m->major == major && m->minor == minor && mount_shows(m, rel, rest))
			return m;
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Files: id -> printable (already escaped) path                      */

struct known_file {
	struct file_id id;
	char *path;		/* escaped, ready to print */
	bool used;
};

static struct file_table {
	struct known_file *slots;
	size_t capacity, count;
	size_t files_read;	/* distinct files that had a page recorded */
} files;

static bool same_file(const struct file_id *a, const struct file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->generation == b->generation;
}

static size_t file_hash(const struct file_id *id)
{
	unsigned long long h = id->ino * 0x9e3779b97f4a7c15ULL;

	h ^= ((unsigned long long)id->dev << 32) ^ id->generation;
	return (size_t)(h ^ (h >> 29));
}

static struct known_file *file_slot(const struct file_id *id)
{
	size_t i = file_hash(id) & (files.capacity - 1);

	while (files.slots[i].path && !same_file(&files.slots[i].id, id))
		i = (i + 1) & (files.capacity - 1);
	return &files.slots[i];
}

static int grow_files(void)
{
	struct file_table old = files;

	files.capacity = old.capacity ? old.capacity * 2 : 1024;
	files.slots = calloc(files.capacity, sizeof(*files.slots));
	if (!files.slots)
		return -1;
	for (size_t i = 0; i < old.capacity; i++)
		if (old.slots[i].path)
			*file_slot(&old.slots[i].id) = old.slots[i];
	free(old.slots);
	return 0;
}

static void remember_file(const struct file_id *id, char *path)
{
	struct known_file *slot;

	if ((files.count + 1) * 2 > files.capacity && grow_files()) {
		free(path);
		return;
	}
	slot = file_slot(id);
	if (slot->path) {
		free(slot->path);
	} else {
		files.count++;
		slot->id = *id;
	}
	slot->path = path;
}

static char *escaped_string(const char *raw)
{
	char *text = NULL;
	size_t size = 0;
	FILE *stream = open_memstream(&text, &size);

	if (!stream)
		return NULL;
	write_escaped(stream, raw);
	fclose(stream);
	return text;
}

/* Join names[] (leaf first) into "/a/b/c", relative to the fs root. */
static void join_components(const struct path_event *e, char *rel, size_t size)
{
	size_t used = 0;

	rel[0] = '\0';
	for (int i = (int)e->depth - 1; i >= 0 && used + 1 < size; i--) {
		int n = snprintf(rel + used, size - used, "/%s", e->names[i]);

		if (n < 0)
			break;
		used += (size_t)n;
	}
	if (used >= size)
		used = size - 1;
	if (!used)
		strcpy(rel, "/");
}

static char *unknown_path(const struct file_id *id)
{
	char *text = NULL;

	if (asprintf(&text, "//unknown/%u:%u/%llu", id->dev >> 20, id->dev & 0xfffff,
		     (unsigned long long)id->ino) < 0)
		return NULL;
	return text;
}

static char *resolve_path(const struct path_event *e)
{
	unsigned int major = e->file.dev >> 20, minor = e->file.dev & 0xfffff;
	const struct mount_entry *m;
	const char *rest;
	char rel[PATH_MAX], full[PATH_MAX + 64], *escaped, *text = NULL;

	if (e->flags & (PATH_TOO_DEEP | PATH_NO_DENTRY))
		return unknown_path(&e->file);
	join_components(e, rel, sizeof(rel));
	m = find_mount(major, minor, rel, &rest);
	if (!m && !load_mounts())	/* mounted after we started? */
		m = find_mount(major, minor, rel, &rest);
	if (!m)
		snprintf(full, sizeof(full), "//dev/%u:%u%s", major, minor, rel);
	else if (!strcmp(m->mount_point, "/"))
		snprintf(full, sizeof(full), "%s", *rest ? rest : "/");
	else
		snprintf(full, sizeof(full), "%s%s", m->mount_point, rest);
	escaped = escaped_string(full);
	if (!escaped)
		return NULL;
	if (!(e->flags & PATH_DELETED))
		return escaped;
	if (asprintf(&text, "//deleted%s", escaped) < 0)
		text = NULL;
	free(escaped);
	return text;
}

/* ------------------------------------------------------------------ */
/* Output                                                             */

static struct run_state {
	FILE *out;
	long long realtime_offset_ns;	/* REALTIME - MONOTONIC at start */
	unsigned long long start_mono_ns, end_mono_ns;
	unsigned long long pages, bios;
	long page_size;
	bool write_failed;
	const char *attach_name;
	const char *walk_name;	/* how bios are walked: bpf_loop or unrolled */
} run = { .page_size = 4096 };

static const char *const cause_names[] = {
	[CAUSE_UNKNOWN] = "-", [CAUSE_READ] = "read", [CAUSE_SYNC_RA] = "sync_ra",
	[CAUSE_ASYNC_RA] = "async_ra", [CAUSE_FORCED_RA] = "forced_ra",
	[CAUSE_FAULT] = "fault",
};

static unsigned long long clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void measure_clock_offset(void)
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
		write_escaped(out, opts.command);
	} else if (opts.argv) {
		for (char **a = opts.argv; *a; a++) {
			if (a != opts.argv)
				fputs("\\040", out);	/* keep the header one token per word */
			write_escaped(out, *a);
		}
	} else if (opts.pid) {
		fprintf(out, "pid\\040%d", opts.pid);
	} else {
		fputs("system-wide", out);
	}
}

static void write_header(FILE *out)
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
	fprintf(out, "# pagetrace-format: 1\n# page-size: %ld\n# clock: realtime-us\n",
		run.page_size);
	fprintf(out, "# columns: timestamp_us path offset%s\n",
		opts.extra ? " pid tid comm cause dev ino" : "");
	fputs("# command: ", out);
	print_command(out);
	fprintf(out, "\n# start: %s\n# kernel: %s\n# host: %s\n", stamp, uts.release, host);
	fprintf(out, "# tracer: %s %s (block:block_bio_queue, %s, %s)\n", TOOL, TRACE_VERSION,
		run.attach_name, run.walk_name);
	fflush(out);
}

static const char *path_of(const struct file_id *id)
{
	struct known_file *slot = files.capacity ? file_slot(id) : NULL;

	if (!slot || !slot->path) {
		char *unknown = unknown_path(id);

		if (!unknown)
			return "//unknown";
		remember_file(id, unknown);
		slot = file_slot(id);
	}
	if (!slot->used) {
		slot->used = true;
		files.files_read++;
	}
	return slot->path;
}

static void write_pages(const struct pages_event *e)
{
	unsigned long long ts_us = ((long long)e->ts_ns + run.realtime_offset_ns) / 1000;
	const char *path = path_of(&e->file);
	unsigned long long page_bytes = 1ULL << e->page_shift;
	char comm[TASK_COMM_LEN + 1] = {};

	memcpy(comm, e->comm, TASK_COMM_LEN);
	for (__u32 i = 0; i < e->nr_pages; i++) {
		fprintf(run.out, "%llu %s %llu", ts_us, path, (e->index + i) * page_bytes);
		if (opts.extra) {
			fprintf(run.out, " %u %u ", e->pid, e->tid);
			write_escaped(run.out, comm[0] ? comm : "-");
			fprintf(run.out, " %s %u:%u %llu", e->cause < sizeof(cause_names) / sizeof(*cause_names) ?
				cause_names[e->cause] : "-", e->file.dev >> 20, e->file.dev & 0xfffff,
				(unsigned long long)e->file.ino);
		}
		putc('\n', run.out);
	}
	run.pages += e->nr_pages;
	run.end_mono_ns = e->ts_ns;
}

static int handle_event(void *ctx, void *data, size_t size)
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
	}
	if (ferror(run.out)) {
		run.write_failed = true;
		return -EIO;	/* stops ring_buffer__poll */
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Kernel features and loading                                        */

struct tracepoint_progs {
	const char *name;	/* tracepoint, e.g. "block_bio_queue" */
	const char *group;	/* its tracefs group, for messages */
	bool required;
	struct bpf_program *btf_prog, *raw_prog;
};

#define NR_TRACEPOINTS 9

static void describe_tracepoints(struct trace_bpf *skel, struct tracepoint_progs *tps)
{
	struct tracepoint_progs table[NR_TRACEPOINTS] = {
		{ "block_bio_queue", "block", true, skel->progs.btf_bio_queue, skel->progs.raw_bio_queue },
		{ "sched_process_fork", "sched", true, skel->progs.btf_fork, skel->progs.raw_fork },
		{ "sched_process_exit", "sched", true, skel->progs.btf_exit, skel->progs.raw_exit },
		{ "page_cache_sync_ra", "readahead", false, skel->progs.btf_sync_ra, skel->progs.raw_sync_ra },
		{ "page_cache_async_ra", "readahead", false, skel->progs.btf_async_ra, skel->progs.raw_async_ra },
		{ "page_cache_ra_unbounded", "readahead", false, skel->progs.btf_ra_unbounded, skel->progs.raw_ra_unbounded },
		{ "page_cache_ra_order", "readahead", false, skel->progs.btf_ra_order, skel->progs.raw_ra_order },
		{ "mm_filemap_fault", "filemap", false, skel->progs.btf_fault, skel->progs.raw_fault },
		{ "mm_filemap_get_pages", "filemap", false, skel->progs.btf_get_pages, skel->progs.raw_get_pages },
	};

	memcpy(tps, table, sizeof(table));
}

/* Does the kernel have this tracepoint? Its BTF names a btf_trace_<name> typedef. */
static bool kernel_has_tracepoint(const struct btf *vmlinux, const char *name)
{
	char type_name[128];

	snprintf(type_name, sizeof(type_name), "btf_trace_%s", name);
	return btf__find_by_name_kind(vmlinux, type_name, BTF_KIND_TYPEDEF) >= 0;
}

/*
 * Decide which programs load. Missing required tracepoints are fatal and
 * named; missing optional ones only cost the "cause" column.
 */
static int select_programs(struct tracepoint_progs *tps, bool use_btf, bool *want_cause)
{
	struct btf *vmlinux = opts.btf_path ? btf__parse(opts.btf_path, NULL) :
					      btf__load_vmlinux_btf();
	int missing_required = 0, missing_optional = 0;

	if (!vmlinux && opts.btf_path) {
		fprintf(stderr, "%s: --btf %s: %s\n", TOOL, opts.btf_path, strerror(errno));
		return -1;
	}
	if (!vmlinux) {
		fprintf(stderr, "%s: kernel BTF (/sys/kernel/btf/vmlinux): %s; "
			"pagetrace needs a kernel built with CONFIG_DEBUG_INFO_BTF=y, "
			"or a BTF file for it given with --btf\n",
			TOOL, strerror(errno));
		return -1;
	}
	for (int i = 0; i < NR_TRACEPOINTS; i++) {
		bool present = kernel_has_tracepoint(vmlinux, tps[i].name);

		if (!present && tps[i].required) {
			fprintf(stderr, "%s: kernel lacks tracepoint %s:%s, which pagetrace needs\n",
				TOOL, tps[i].group, tps[i].name);
			missing_required++;
		} else if (!present) {
			if (!opts.quiet)
				fprintf(stderr, "%s: kernel lacks tracepoint %s:%s; the cause column will be '-'\n",
					TOOL, tps[i].group, tps[i].name);
			missing_optional++;
		}
		bpf_program__set_autoload(tps[i].btf_prog, present && use_btf);
		bpf_program__set_autoload(tps[i].raw_prog, present && !use_btf);
	}
	btf__free(vmlinux);
	*want_cause = missing_optional == 0;
	if (!*want_cause)	/* all or nothing: a partial cause would mislead */
		for (int i = 3; i < NR_TRACEPOINTS; i++) {
			bpf_program__set_autoload(tps[i].btf_prog, false);
			bpf_program__set_autoload(tps[i].raw_prog, false);
		}
	return missing_required ? -1 : 0;
}

static int libbpf_print(enum libbpf_print_level level, const char *format, va_list args)
{
	if (level == LIBBPF_DEBUG && !opts.verbose)
		return 0;
	if (!opts.verbose)
		return 0;	/* load failures are explained by trace itself */
	return vfprintf(stderr, format, args);
}

static void explain_load_error(int err)
{
	if (err == -EPERM || err == -EACCES)
		fprintf(stderr, "%s: loading BPF programs: %s: run as root, or with CAP_BPF and CAP_PERFMON "
			"(uid %d)\n", TOOL, strerror(-err), getuid());
	else
		fprintf(stderr, "%s: loading BPF programs: %s (rerun with -v for the verifier's log)\n",
			TOOL, strerror(-err));
}

/* open -> set rodata -> load, with either the tp_btf or the raw_tp programs. */
static struct trace_bpf *open_and_load(bool use_btf, int *err)
{
	LIBBPF_OPTS(bpf_object_open_opts, open_opts, .btf_custom_path = opts.btf_path);
	struct tracepoint_progs tps[NR_TRACEPOINTS];
	struct trace_bpf *skel = trace_bpf__open_opts(&open_opts);
	bool want_cause = false;

	if (!skel) {
		*err = -errno;
		fprintf(stderr, "%s: opening BPF object: %s\n", TOOL, strerror(errno));
		return NULL;
	}
	describe_tracepoints(skel, tps);
	if (select_programs(tps, use_btf, &want_cause)) {
		*err = -ENOENT;
		goto fail;
	}
	skel->rodata->trace_all = opts.all;
	skel->rodata->follow_children = !opts.no_children;
	skel->rodata->want_cause = want_cause;
	skel->rodata->page_shift = __builtin_ctzl((unsigned long)run.page_size);
	/* libbpf cannot probe helpers for tracing programs; the helper set is the same. */
	skel->rodata->use_bpf_loop = !opts.no_bpf_loop &&
		libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_loop, NULL) == 1;
	run.walk_name = skel->rodata->use_bpf_loop ? "bpf_loop" : "unrolled";
	bpf_map__set_max_entries(skel->maps.events, opts.ringbuf_bytes);
	skel->rodata->wakeup_bytes = opts.ringbuf_bytes / 4;
	*err = trace_bpf__load(skel);
	if (*err)
		goto fail;
	return skel;
fail:
	trace_bpf__destroy(skel);
	return NULL;
}

static struct trace_bpf *load_programs(void)
{
	struct trace_bpf *skel = NULL;
	int err = 0;

	if (opts.attach != ATTACH_RAW_TP) {
		skel = open_and_load(true, &err);
		run.attach_name = "tp_btf";
		if (skel || err == -ENOENT || opts.attach == ATTACH_TP_BTF)
			goto out;
		if (opts.verbose)
			fprintf(stderr, "%s: tp_btf programs refused (%s); trying raw_tp\n", TOOL, strerror(-err));
	}
	skel = open_and_load(false, &err);
	run.attach_name = "raw_tp";
out:
	if (!skel && err != -ENOENT)
		explain_load_error(err);
	return skel;
}

/* ------------------------------------------------------------------ */
/* Targets                                                            */

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static int mark_traced(struct trace_bpf *skel, pid_t tid)
{
	__u32 key = (__u32)tid;
	__u8 one = 1;

	if (bpf_map__update_elem(skel->maps.traced_tids, &key, sizeof(key), &one, sizeof(one), BPF_ANY))
		return fprintf(stderr, "%s: tracing task %d: %s\n", TOOL, tid, strerror(errno)), -1;
	return 0;
}

/* -p: every thread of PID; enumerated after attaching, so new ones are caught by fork. */
static int adopt_process(struct trace_bpf *skel, pid_t pid)
{
	char dir_name[64];
	struct dirent *entry;
	DIR *dir;
	int n = 0;

	snprintf(dir_name, sizeof(dir_name), "/proc/%d/task", pid);
	dir = opendir(dir_name);
	if (!dir)
		return fprintf(stderr, "%s: -p %d: %s\n", TOOL, pid,
			       errno == ENOENT ? "No such process" : strerror(errno)), -1;
	while ((entry = readdir(dir)))
		if (entry->d_name[0] != '.' && !mark_traced(skel, atoi(entry->d_name)))
			n++;
	closedir(dir);
	return n ? 0 : -1;
}

/* Who the command runs as: -u USER, else the sudo caller, else ourselves. */
static int target_credentials(struct passwd *pw_out)
{
	struct passwd *pw = NULL;
	const char *sudo_uid = getenv("SUDO_UID");

	if (opts.user) {
		pw = getpwnam(opts.user);
		if (!pw)
			return fprintf(stderr, "%s: -u %s: no such user\n", TOOL, opts.user), -1;
	} else if (getuid() == 0 && sudo_uid) {
		pw = getpwuid((uid_t)atol(sudo_uid));
		if (!pw)
			return fprintf(stderr, "%s: SUDO_UID=%s: no such user\n", TOOL, sudo_uid), -1;
	}
	if (pw)
		*pw_out = *pw;
	else
		pw_out->pw_name = NULL;
	return 0;
}

static void drop_privileges(const struct passwd *pw)
{
	if (!pw->pw_name || pw->pw_uid == geteuid())
		return;
	if (initgroups(pw->pw_name, pw->pw_gid) || setgid(pw->pw_gid) || setuid(pw->pw_uid)) {
		fprintf(stderr, "%s: running as %s: %s\n", TOOL, pw->pw_name, strerror(errno));
		_exit(126);
	}
	setenv("HOME", pw->pw_dir, 1);
	setenv("USER", pw->pw_name, 1);
	setenv("LOGNAME", pw->pw_name, 1);
}

/*
 * Fork the command stopped on a pipe, mark it traced, then let it exec: the
 * programs are attached before its first instruction, so the loader's reads
 * are in the trace.
 */
static pid_t start_command(struct trace_bpf *skel)
{
	struct passwd pw = {};
	int gate[2];
	char go;
	pid_t child;

	if (target_credentials(&pw) || pipe2(gate, O_CLOEXEC))
		return -1;
	child = fork();
	if (child < 0)
		return fprintf(stderr, "%s: fork: %s\n", TOOL, strerror(errno)), -1;
	if (child == 0) {
		close(gate[1]);
		if (read(gate[0], &go, 1) != 1)
			_exit(127);	/* trace failed before starting us */
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		/* The trace owns stdout: the command's own output goes to stderr. */
		if (!opts.output && dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
			_exit(127);
		drop_privileges(&pw);
		if (opts.command)
			execl("/bin/sh", "sh", "-c", opts.command, (char *)NULL);
		else
			execvp(opts.argv[0], opts.argv);
		fprintf(stderr, "%s: %s: %s\n", TOOL, opts.command ? "/bin/sh" : opts.argv[0], strerror(errno));
		_exit(127);
	}
	close(gate[0]);
	if (mark_traced(skel, child)) {
		close(gate[1]);
		waitpid(child, NULL, 0);
		return -1;
	}
	if (write(gate[1], "g", 1) != 1) {
		close(gate[1]);
		return fprintf(stderr, "%s: starting command: %s\n", TOOL, strerror(errno)), -1;
	}
	close(gate[1]);
	return child;
}

static int exit_code_of(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

/*
 * Has the target finished? Sets *status for a child we started. A pidfd
 * turns readable when an adopted process exits, even while it is a zombie
 * nobody has reaped yet, which kill(pid, 0) cannot see.
 */
static bool target_done(pid_t child, int adopted_pidfd, pid_t adopted, int *status)
{
	struct pollfd pfd = { .fd = adopted_pidfd, .events = POLLIN };

	if (child > 0)
		return waitpid(child, status, WNOHANG) == child;
	if (adopted_pidfd >= 0)
		return poll(&pfd, 1, 0) == 1;
	if (adopted > 0)
		return kill(adopted, 0) && errno == ESRCH;
	return false;
}

/* ------------------------------------------------------------------ */
/* Main loop and reporting                                            */

static unsigned long long counter_total(struct trace_bpf *skel, __u32 slot)
{
	int ncpus = libbpf_num_possible_cpus();
	unsigned long long total = 0;
	__u64 *values;

	if (ncpus <= 0)
		return 0;
	values = calloc(ncpus, sizeof(*values));
	if (!values)
		return 0;
	if (!bpf_map__lookup_elem(skel->maps.counters, &slot, sizeof(slot), values,
				  sizeof(*values) * ncpus, 0))
		for (int i = 0; i < ncpus; i++)
			total += values[i];
	free(values);
	return total;
}

struct lost_counts {
	unsigned long long ringbuf, path, long_bio, tasks, total;
};

static struct lost_counts read_lost(struct trace_bpf *skel)
{
	struct lost_counts lost = {
		.ringbuf = counter_total(skel, COUNTER_LOST_RINGBUF),
		.path = counter_total(skel, COUNTER_LOST_PATH),
		.long_bio = counter_total(skel, COUNTER_LOST_LONG_BIO),
		.tasks = counter_total(skel, COUNTER_LOST_TASKS),
	};

	lost.total = lost.ringbuf + lost.path + lost.long_bio + lost.tasks;
	return lost;
}

static void write_trailer(const struct lost_counts *lost, unsigned long long duration_us)
{
	fprintf(run.out, "# end: pages=%llu bytes=%llu files=%zu duration_us=%llu lost=%llu\n",
		run.pages, run.pages * run.page_size, files.files_read, duration_us, lost->total);
	fflush(run.out);
}

static void report(const struct lost_counts *lost, unsigned long long duration_us)
{
	double seconds = duration_us / 1e6;

	if (lost->total)
		fprintf(stderr, "%s: %llu events LOST (ring buffer full: %llu, names: %llu, "
			"bios too long: %llu, untracked children: %llu); the trace is incomplete%s\n",
			TOOL, lost->total, lost->ringbuf, lost->path, lost->long_bio, lost->tasks,
			lost->ringbuf || lost->path ? ": try a larger --ringbuf-size" : "");
	if (opts.quiet)
		return;
	fprintf(stderr, "%s: %llu pages, %.1f MiB, %zu files, %.2f s, %.0f events/s, %llu lost\n",
		TOOL, run.pages, run.pages * (double)run.page_size / (1 << 20), files.files_read,
		seconds, seconds > 0 ? run.bios / seconds : 0.0, lost->total);
}

static int open_output(void)
{
	int fd;

	if (!opts.output) {
		run.out = stdout;
	} else {
		fd = open(opts.output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			return fprintf(stderr, "%s: %s: %s\n", TOOL, opts.output, strerror(errno)), -1;
		run.out = fdopen(fd, "w");
		if (!run.out)
			return close(fd), -1;
		/* Hand the file to the sudo caller, who will want to read and delete it. */
		if (getuid() == 0 && getenv("SUDO_UID") && getenv("SUDO_GID") &&
		    fchown(fd, (uid_t)atol(getenv("SUDO_UID")), (gid_t)atol(getenv("SUDO_GID"))))
			fprintf(stderr, "%s: %s: chown: %s\n", TOOL, opts.output, strerror(errno));
	}
	setvbuf(run.out, NULL, _IOFBF, 1 << 20);
	return 0;
}

static void install_signal_handlers(void)
{
	struct sigaction action = { .sa_handler = on_signal };

	sigaction(SIGINT, &action, NULL);
	sigaction(SIGTERM, &action, NULL);
	signal(SIGPIPE, SIG_IGN);	/* a closed stdout shows up as a write error */
}

/*
 * A once-a-second progress line for long runs, only when nobody else writes
 * to the terminal: with -c the command's own output goes to stderr.
 */
static bool want_progress(void)
{
	return !opts.quiet && !opts.command && !opts.argv && isatty(STDERR_FILENO);
}

static void show_progress(unsigned long long *next_ns)
{
	unsigned long long now = clock_ns(CLOCK_MONOTONIC);

	if (now < *next_ns)
		return;
	*next_ns = now + 1000000000ULL;
	fprintf(stderr, "\r%s: %llu pages, %.1f MiB, %zu files, %.0f s ", TOOL, run.pages,
		run.pages * (double)run.page_size / (1 << 20), files.files_read,
		(now - run.start_mono_ns) / 1e9);
}

static int poll_until_done(struct ring_buffer *rb, pid_t child, pid_t adopted, int *status)
{
	int pidfd = adopted > 0 ? (int)syscall(SYS_pidfd_open, adopted, 0) : -1;
	unsigned long long deadline = opts.duration > 0 ?
		clock_ns(CLOCK_MONOTONIC) + (unsigned long long)(opts.duration * 1e9) : 0;
	unsigned long long next_progress_ns = 0;
	bool progress = want_progress();
	int err;

	while (!stop_requested && !run.write_failed) {
		err = ring_buffer__poll(rb, 100);
		if (err < 0 && err != -EINTR)
			break;
		if (progress)
			show_progress(&next_progress_ns);
		if (target_done(child, pidfd, adopted, status))
			break;
		if (deadline && clock_ns(CLOCK_MONOTONIC) >= deadline)
			break;
	}
	/* Everything queued before the target ended is already in the buffer. */
	ring_buffer__consume(rb);
	if (progress)
		fputc('\n', stderr);
	if (pidfd >= 0)
		close(pidfd);
	return 0;
}

/* Stop a command we started when trace itself is interrupted or fails. */
static void reap_command(pid_t child, int *status)
{
	if (child <= 0 || waitpid(child, status, WNOHANG) == child)
		return;
	kill(child, SIGTERM);
	waitpid(child, status, 0);
}

int main(int argc, char **argv)
{
	static const struct argp argp = { argp_options, parse_opt, "[-- CMD [ARGS...]]", doc, NULL, NULL, NULL };
	struct trace_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct lost_counts lost = {};
	pid_t child = -1, adopted = -1;
	unsigned long long duration_us;
	int status = 0, exit_code = 1, err;

	err = argp_parse(&argp, argc, argv, 0, NULL, NULL);
	if (err || check_options())
		return 2;
	run.page_size = sysconf(_SC_PAGESIZE);
	libbpf_set_print(libbpf_print);
	if (open_output())
		return 1;

	skel = load_programs();
	if (!skel)
		goto cleanup;
	if (load_mounts())
		goto cleanup;
	err = trace_bpf__attach(skel);
	if (err) {
		fprintf(stderr, "%s: attaching to tracepoints: %s\n", TOOL, strerror(-err));
		goto cleanup;
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), handle_event, NULL, NULL);
	if (!rb) {
		fprintf(stderr, "%s: ring buffer: %s\n", TOOL, strerror(errno));
		goto cleanup;
	}
	install_signal_handlers();
	measure_clock_offset();
	write_header(run.out);

	if (opts.pid && adopt_process(skel, opts.pid))
		goto cleanup;
	adopted = opts.pid ? opts.pid : -1;
	if ((opts.command || opts.argv) && (child = start_command(skel)) < 0)
		goto cleanup;

	poll_until_done(rb, child, adopted, &status);
	reap_command(child, &status);
	lost = read_lost(skel);
	duration_us = (clock_ns(CLOCK_MONOTONIC) - run.start_mono_ns) / 1000;
	write_trailer(&lost, duration_us);
	if (run.write_failed || ferror(run.out)) {
		fprintf(stderr, "%s: writing the trace: %s\n", TOOL, strerror(errno ? errno : EIO));
		goto cleanup;
	}
	report(&lost, duration_us);
	exit_code = child > 0 ? exit_code_of(status) : 0;
	if (exit_code == 0 && lost.total && !opts.allow_lost)
		exit_code = EXIT_LOST;

cleanup:
	if (exit_code == 1 && child > 0)
		reap_command(child, &status);
	ring_buffer__free(rb);
	trace_bpf__destroy(skel);
	if (run.out && run.out != stdout)
		fclose(run.out);
	else if (run.out)
		fflush(run.out);
	free_mounts();
	return exit_code;
}
