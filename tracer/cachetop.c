// SPDX-License-Identifier: GPL-2.0
/*
 * cachetop: page-cache hits, misses, dirties and fault-around mappings per
 * process, per file or per cgroup, every INTERVAL; or, with -c CMD, once for CMD and
 * its descendants when CMD exits. Counted by cache.bpf.c (the words are
 * page_access.bpf.h's). Owns the options, the per-process and per-file
 * tables (read from the BPF maps, sorted, printed as text or JSON) and the
 * wait for CMD; loading is cache_load.c's, file names are paths.c's,
 * cgroup paths lib/cgroup.c's, container names lib/container.c's,
 * starting CMD is command.c's.
 */
#define _GNU_SOURCE
#include <argp.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include "errmsg.h"
#include "stop_signals.h"
#include "json.h"
#include "attach_choice.h"
#include "bpf_cost.h"
#include "cgroup_names.h"
#include "container.h"
#include "option.h"
#include "target_options.h"
#include "command.h"
#include "paths.h"
#include "cache_load.h"
#include "cache.skel.h"

#define TOOL "cachetop"
/* Rows per interval in the top view. */
#define TOP_ROWS 20

static struct options {
	const char *command;	/* -c */
	enum by { BY_PROCESS, BY_FILE, BY_CGROUP } by;	/* --by, --files */
	bool drop_caches;	/* --drop-caches (-c) */
	struct cache_args common;	/* [INTERVAL [COUNT]], -j, -v, -p, --cgroup, --container */
} opts;

static const char doc[] =
"Page-cache hits, misses and dirties per process (or per file with --files),\n"
"every INTERVAL seconds (default 1), COUNT times (default: until Ctrl-C);\n"
"or, with -c CMD, once for CMD and all its descendants when CMD exits.\n"
"A hit is an access to a page that was in the cache; a miss is the first\n"
"access to a page read from storage while cachetop runs; an access is a\n"
"page a read, pread, readv, sendfile or splice asked for, or the faulting\n"
"page of an mmap fault. MAPPED counts pages that fault-around mapped without\n"
"a fault on them. Writes count as dirties, never as misses.\n"
"READ_HIT% = hits / (hits + misses). Needs root.\n"
"\n"
"USAGE: cachetop [OPTIONS] [INTERVAL [COUNT]]\n"
"       cachetop [OPTIONS] -c CMD\n"
"\n"
"EXAMPLES:\n"
"  sudo pagetrace-cachetop                    # top processes, every second\n"
"  sudo pagetrace-cachetop --files 5          # top files, every 5 s\n"
"  sudo pagetrace-cachetop --by cgroup        # top cgroups (containers by name)\n"
"  sudo pagetrace-cachetop -p 1234 1 10       # one process, 10 s\n"
"  sudo pagetrace-cachetop --cgroup /system.slice/nginx.service  # one service\n"
"  sudo pagetrace-cachetop --container web --files  # one container's files\n"
"  sudo pagetrace-cachetop -j -c 'make -j2'   # one JSON object when make ends\n"
"  sudo pagetrace-cachetop --drop-caches -j -c ./app   # a cold start's hits\n"
"\n"
"Exit status with -c: CMD's (128+N if killed by signal N); 1 if cachetop\n"
"itself failed; 2 for bad usage.\n"
"\n"
"OPTIONS:";

/* argp_options and enum option_key: cachetop_options.tsv's (docs/option-tables.md). */
#include "cachetop_options_table.h"

static const struct option_word by_words[] = {
	{ "process", BY_PROCESS }, { "file", BY_FILE }, { "cgroup", BY_CGROUP }, {},
};

static error_t parse_opt(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case ARGP_KEY_INIT: state->child_inputs[0] = &opts.common; break;
	case 'c': opts.command = arg; break;
	case OPT_FILES: opts.by = BY_FILE; break;
	case OPT_BY: opts.by = word_option("--by", arg, by_words); break;
	case OPT_DROP_CACHES: opts.drop_caches = true; break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static int check_options(void)
{
	if (target_count(&opts.common.target) + (opts.command != NULL) > 1)
		return errmsg(NULL, "-p, -c, --cgroup and --container are exclusive"), -1;
	if (opts.drop_caches && !opts.command)
		return errmsg(NULL, "--drop-caches needs -c: it empties the cache before CMD"), -1;
	if (opts.command && opts.common.every.given)
		return errmsg(NULL, "INTERVAL and COUNT do not apply with -c: it reports once, "
			      "when CMD exits"), -1;
	return target_resolve_cgroup(&opts.common.target);
}

/* ------------------------------------------------------------------ */
/* Rows                                                               */

struct row {
	__u32 pid, uid;
	char comm[TASK_COMM_LEN + 1];
	struct file_id file;
	__u64 cgroup;
	struct cache_counts counts;
};

struct table {
	struct row *rows;
	size_t count;
};

static int add_row(struct table *t, const struct row *row)
{
	struct row *grown = reallocarray(t->rows, t->count + 1, sizeof(*grown));

	if (!grown)
		return errmsg(NULL, "out of memory"), -1;
	t->rows = grown;
	t->rows[t->count++] = *row;
	return 0;
}

static struct bpf_map *map_of(struct cache_bpf *skel, enum by by)
{
	return by == BY_FILE ? skel->maps.files : by == BY_CGROUP ? skel->maps.cgroups :
		skel->maps.processes;
}

static void *row_key(struct row *row, enum by by)
{
	return by == BY_FILE ? (void *)&row->file : by == BY_CGROUP ? (void *)&row->cgroup :
		(void *)&row->pid;
}

/* Every entry of the processes, files or cgroups map; emptied with @reset (the top view). */
static int read_table(struct cache_bpf *skel, enum by by, bool reset, struct table *t)
{
	struct bpf_map *map = map_of(skel, by);
	size_t key_size = bpf_map__key_size(map);
	char key[sizeof(struct file_id)], next[sizeof(struct file_id)];
	void *prev = NULL;
	struct row row;
	struct process_counts process;

	t->rows = NULL;
	t->count = 0;
	while (!bpf_map__get_next_key(map, prev, next, key_size)) {
		memcpy(key, next, key_size);
		prev = key;
		memset(&row, 0, sizeof(row));
		if (by != BY_PROCESS) {
			memcpy(row_key(&row, by), key, key_size);
			if (bpf_map__lookup_elem(map, key, key_size, &row.counts, sizeof(row.counts), 0))
				continue;
		} else {
			if (bpf_map__lookup_elem(map, key, key_size, &process, sizeof(process), 0))
				continue;
			memcpy(&row.pid, key, sizeof(row.pid));
			row.uid = process.uid;
			memcpy(row.comm, process.comm, TASK_COMM_LEN);
			row.counts = process.counts;
		}
		if (add_row(t, &row))
			return -1;
	}
	if (reset)
		for (size_t i = 0; i < t->count; i++)
			bpf_map__delete_elem(map, row_key(&t->rows[i], by), key_size, 0);
	return 0;
}

static int busier_first(const void *a, const void *b)
{
	const struct cache_counts *x = &((const struct row *)a)->counts;
	const struct cache_counts *y = &((const struct row *)b)->counts;
	__u64 nx = x->hits + x->misses + x->dirties, ny = y->hits + y->misses + y->dirties;

	return nx < ny ? 1 : nx > ny ? -1 : 0;
}

static const char *row_path(const struct row *row)
{
	struct known_file *known = known_file(&row->file);

	return known ? known->path : "//unknown";
}

static const char *cgroup_path(const struct cgroup_name *name)
{
	return name ? name->path : "//unknown";
}

/* ------------------------------------------------------------------ */
/* Output                                                             */

static void json_counts(FILE *out, const struct cache_counts *c)
{
	fprintf(out, "\"hits\": %llu, \"misses\": %llu, \"mapped\": %llu, \"dirties\": %llu, "
		"\"read_hit_ratio\": %.6f", (unsigned long long)c->hits,
		(unsigned long long)c->misses, (unsigned long long)c->mapped,
		(unsigned long long)c->dirties, read_hit_ratio(c->hits, c->misses));
}

static void json_cgroup(FILE *out, __u64 id)
{
	const struct cgroup_name *name = name_cgroup(id, NULL);

	fprintf(out, "\"cgroup_id\": %llu, \"cgroup\": ", (unsigned long long)id);
	json_puts(out, cgroup_path(name));
	fputs(", \"container\": ", out);
	json_puts_or_null(out, name && name->container[0] ? name->container : NULL);
}

static void json_rows(FILE *out, const struct table *t, enum by by)
{
	putc('[', out);
	for (size_t i = 0; i < t->count; i++) {
		const struct row *row = &t->rows[i];

		fputs(i ? ", {" : "{", out);
		if (by == BY_FILE) {
			fputs("\"path\": ", out);
			json_puts(out, row_path(row));
		} else if (by == BY_CGROUP) {
			json_cgroup(out, row->cgroup);
		} else {
			fprintf(out, "\"pid\": %u, \"uid\": %u, \"comm\": ", row->pid, row->uid);
			json_puts(out, row->comm);
		}
		fputs(", ", out);
		json_counts(out, &row->counts);
		putc('}', out);
	}
	putc(']', out);
}

/* The container's name, else the cgroup's path. */
static const char *row_cgroup(const struct row *row)
{
	const struct cgroup_name *name = name_cgroup(row->cgroup, NULL);

	return name && name->container[0] ? name->container : cgroup_path(name);
}

static void text_rows(FILE *out, const struct table *t, enum by by, size_t limit)
{
	bool by_file = by == BY_FILE;

	if (by != BY_PROCESS)
		fprintf(out, "%10s %10s %10s %10s %9s  %s\n", "HITS", "MISSES", "MAPPED", "DIRTIES",
			"READ_HIT%", by_file ? "PATH" : "CGROUP");
	else
		fprintf(out, "%7s %6s %-16s %10s %10s %10s %10s %9s\n", "PID", "UID", "COMM", "HITS",
			"MISSES", "MAPPED", "DIRTIES", "READ_HIT%");
	for (size_t i = 0; i < t->count && i < limit; i++) {
		const struct row *r = &t->rows[i];
		const struct cache_counts *c = &r->counts;
		double ratio = read_hit_ratio(c->hits, c->misses) * 100;

		if (by != BY_PROCESS)
			fprintf(out, "%10llu %10llu %10llu %10llu %8.2f%%  %s\n",
				(unsigned long long)c->hits, (unsigned long long)c->misses,
				(unsigned long long)c->mapped, (unsigned long long)c->dirties, ratio,
				by_file ? row_path(r) : row_cgroup(r));
		else
			fprintf(out, "%7u %6u %-16s %10llu %10llu %10llu %10llu %8.2f%%\n", r->pid,
				r->uid, r->comm, (unsigned long long)c->hits,
				(unsigned long long)c->misses, (unsigned long long)c->mapped,
				(unsigned long long)c->dirties, ratio);
	}
}

/* ------------------------------------------------------------------ */
/* File names (ring buffer of path events)                            */

static int handle_event(void *ctx, void *data, size_t size)
{
	const struct path_event *e = data;
	const struct cgroup_event *c = data;
	char *path;

	(void)ctx;
	if (size >= sizeof(*c) && c->kind == CGROUP_EVENT_KIND) {
		char component[CGROUP_NAME_LEN + 1] = "";

		memcpy(component, c->name, CGROUP_NAME_LEN);
		name_cgroup(c->id, component);
		return 0;
	}
	if (size < sizeof(*e) || e->kind != PATH_EVENT_KIND)
		return 0;
	path = resolve_path(e);
	if (path)
		remember_file(&e->file, path);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Modes                                                              */

static const char *const table_name[] = {
	[BY_PROCESS] = "processes", [BY_FILE] = "files", [BY_CGROUP] = "cgroups",
};

/* One interval's table: 0, or -1 when stdout cannot take it (said). */
static int print_top(struct cache_bpf *skel, struct ring_buffer *rb)
{
	struct table t;
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	ring_buffer__consume(rb);
	if (read_table(skel, opts.by, true, &t))
		return 0;
	qsort(t.rows, t.count, sizeof(*t.rows), busier_first);
	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (opts.common.json) {
		printf("{\"time\": \"%s\", \"%s\": ", stamp, table_name[opts.by]);
		json_rows(stdout, &t, opts.by);
		puts("}");
	} else {
		printf("%s\n", stamp);
		text_rows(stdout, &t, opts.by, TOP_ROWS);
		putchar('\n');
	}
	free(t.rows);
	return errmsg_stdout_flushed();
}

/* Sleep up to @seconds, polling the ring buffer for names meanwhile. */
static void wait_interval(struct ring_buffer *rb, double seconds)
{
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		ring_buffer__poll(rb, 100);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (stop_requested || (now.tv_sec - start.tv_sec) +
		    (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds)
			return;
	}
}

static int run_top(struct cache_bpf *skel, struct ring_buffer *rb)
{
	double since_forget = 0;	/* --by cgroup for days: names of gone ones dropped */

	for (unsigned long i = 0; !stop_requested && (!opts.common.every.count || i < opts.common.every.count); i++) {
		wait_interval(rb, opts.common.every.seconds);
		if (print_top(skel, rb))
			return 1;
		since_forget += opts.common.every.seconds;
		if (opts.by == BY_CGROUP && since_forget >= 60) {
			forget_gone_cgroups();
			since_forget = 0;
		}
	}
	return 0;
}

/* -c: the summary, once CMD has exited: 0, or -1 when stdout cannot take it
 * (said). */
static int print_summary(struct cache_bpf *skel, const __u64 *totals, int exit_code)
{
	struct cache_counts all = {
		.hits = totals[CACHE_HITS], .misses = totals[CACHE_MISSES],
		.dirties = totals[CACHE_DIRTIES], .mapped = totals[CACHE_MAPPED],
	};
	struct table procs = {}, files_table = {}, cgroups_table = {};
	struct bpf_cost cost;
	int failed = 0;

	cache_cost(skel, &cost);
	if (read_table(skel, BY_PROCESS, false, &procs) ||
	    read_table(skel, BY_FILE, false, &files_table) ||
	    (opts.by == BY_CGROUP && read_table(skel, BY_CGROUP, false, &cgroups_table)))
		goto out;
	qsort(procs.rows, procs.count, sizeof(*procs.rows), busier_first);
	qsort(files_table.rows, files_table.count, sizeof(*files_table.rows), busier_first);
	qsort(cgroups_table.rows, cgroups_table.count, sizeof(*cgroups_table.rows), busier_first);
	if (opts.common.json) {
		fputs("{\"command\": ", stdout);
		json_puts(stdout, opts.command);
		printf(", \"exit_status\": %d, ", exit_code);
		json_counts(stdout, &all);
		printf(", \"lost\": %llu, ", (unsigned long long)cache_lost(totals));
		cost_json(stdout, &cost);
		fputs(", \"processes\": ", stdout);
		json_rows(stdout, &procs, BY_PROCESS);
		fputs(", \"files\": ", stdout);
		json_rows(stdout, &files_table, BY_FILE);
		if (opts.by == BY_CGROUP) {
			fputs(", \"cgroups\": ", stdout);
			json_rows(stdout, &cgroups_table, BY_CGROUP);
		}
		puts("}");
	} else {
		printf("%s: hits %llu, misses %llu, mapped %llu, dirties %llu, read hit ratio %.2f%%\n",
		       opts.command, (unsigned long long)all.hits, (unsigned long long)all.misses,
		       (unsigned long long)all.mapped, (unsigned long long)all.dirties,
		       read_hit_ratio(all.hits, all.misses) * 100);
		text_rows(stdout, opts.by == BY_FILE ? &files_table : opts.by == BY_CGROUP ?
			  &cgroups_table : &procs, opts.by, (size_t)-1);
		cost_print(stderr, TOOL, &cost, opts.common.verbose);
	}
	failed = errmsg_stdout_flushed();
out:
	free(procs.rows);
	free(files_table.rows);
	free(cgroups_table.rows);
	return failed;
}

/* Is the first word of CMD something the shell can run? */
static int check_command(const char *command)
{
	char word[256];
	char *check = NULL;
	int status;

	if (sscanf(command, " %255s", word) != 1)
		return errmsg("-c", "empty command"), -1;
	if (asprintf(&check, "command -v -- '%s' >/dev/null 2>&1", word) < 0)
		return errmsg(NULL, "out of memory"), -1;
	if (strchr(word, '\'')) {	/* quoting we do not parse: let the shell say */
		free(check);
		return 0;
	}
	status = system(check);
	free(check);
	if (status != 0)
		return errmsg("-c", "%s: command not found", word), -1;
	return 0;
}

static int run_command(struct cache_bpf *skel, struct ring_buffer *rb)
{
	struct command_spec spec = { .shell_command = opts.command, .stdout_to_stderr = true,
				     .drop_caches = opts.drop_caches };
	__u64 totals[NR_CACHE_COUNTERS];
	int status = 0, exit_code;
	pid_t child = start_gated_command(&spec, mark_thread_traced, skel->maps.traced_tids);

	if (child < 0)
		return 1;
	while (waitpid(child, &status, WNOHANG) != child) {
		if (stop_requested) {
			kill(child, SIGTERM);
			waitpid(child, &status, 0);
			break;
		}
		ring_buffer__poll(rb, 100);
	}
	ring_buffer__consume(rb);
	exit_code = exit_code_of(status);
	if (cache_read_totals(skel, totals))
		return 1;
	if (print_summary(skel, totals, exit_code))
		exit_code = exit_code ? exit_code : 1;
	cache_report_lost(totals);
	return exit_code;
}

int main(int argc, char **argv)
{
	static const struct argp_child children[] = { { &cache_args_argp, 0, NULL, 0 }, {} };
	static const struct argp argp = { argp_options, parse_opt, "[INTERVAL [COUNT]]", doc,
					  children, NULL, NULL };
	struct cache_load_options load = {};
	struct cache_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	int exit_code = 1;

	errmsg_init(TOOL);
	if (argp_parse(&argp, argc, argv, 0, NULL, NULL) || check_options())
		return 2;
	if (geteuid() != 0)
		return errmsg(NULL, "needs root (it loads BPF programs): run it with sudo"), 1;
	if (target_resolve_container(&opts.common.target))
		return 1;
	if (opts.common.target.pid && kill(opts.common.target.pid, 0) && errno == ESRCH)
		return errmsg("-p", "%d: no such process", opts.common.target.pid), 1;
	if (opts.command && check_command(opts.command))
		return 127;
	load.all = !opts.common.target.pid && !opts.command && !opts.common.target.cgroup_path;
	load.cgroup = opts.common.target.cgroup_path ? &opts.common.target.cgroup : NULL;
	/* The top view reads and empties one table per interval: keep only that one. */
	load.per_process = opts.command || opts.by == BY_PROCESS;
	load.per_file = opts.command || opts.by == BY_FILE;
	load.per_cgroup = opts.by == BY_CGROUP;
	load.verbose = opts.common.verbose;
	load.cost = opts.command != NULL;	/* reported with -c's summary */
	skel = cache_load(&load);
	if (!skel || load_mounts())
		goto cleanup;
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), handle_event, NULL, NULL);
	if (!rb) {
		errmsg("ring buffer", "%s", errmsg_strerror(errno));
		goto cleanup;
	}
	stop_on_signals();
	if (opts.common.target.pid && adopt_threads(opts.common.target.pid, mark_thread_traced, skel->maps.traced_tids))
		goto cleanup;
	if (!opts.command)
		say_ready(TOOL);	/* with -c, CMD starts once attached anyway */
	exit_code = opts.command ? run_command(skel, rb) : run_top(skel, rb);
cleanup:
	ring_buffer__free(rb);
	if (skel)
		cache_unload(skel);
	free_mounts();
	return exit_code;
}
