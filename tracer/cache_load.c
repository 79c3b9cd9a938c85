// SPDX-License-Identifier: GPL-2.0
/*
 * cache_load: what cachestat and cachetop share on the user side. Owns the
 * loading of cache.bpf.c (which tracepoints, tp_btf or raw_tp, rodata), the
 * traced-task seeding, reading the totals, the lost-event report and the
 * parsing of INTERVAL and COUNT.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include "errmsg.h"
#include <argp.h>
#include "cache_load.h"
#include "cache.skel.h"
#include "attach_choice.h"
#include "bpf_budget.h"

#define NR_PROGRAMS 11

static void describe_programs(struct cache_bpf *skel, struct attach_choice *choices)
{
	__typeof__(skel->progs) *p = &skel->progs;
	struct attach_choice table[NR_PROGRAMS] = {
		ATTACH_BIO_AND_TASKS(p),
		ATTACH_TRACEPOINT(p, "writeback_dirty_folio", "writeback", dirty),
		ATTACH_READS_AND_FAULTS(p),
		ATTACH_PAGE_ACCESS(p),
	};

	memcpy(choices, table, sizeof(table));
}

/* Every attach point is needed; name the ones this kernel lacks. */
static int select_programs(struct cache_bpf *skel, struct attach_choice *choices, bool use_btf)
{
	struct btf *vmlinux = btf__load_vmlinux_btf();
	int missing = 0;

	if (!vmlinux) {
		errmsg("kernel BTF (/sys/kernel/btf/vmlinux)", "%s; the cache tools need a kernel "
		       "built with CONFIG_DEBUG_INFO_BTF=y", errmsg_strerror(errno));
		return -1;
	}
	describe_programs(skel, choices);
	for (int i = 0; i < NR_PROGRAMS; i++)
		attach_choice_find(&choices[i], vmlinux, use_btf);
	attach_choice_functions(choices, NR_PROGRAMS, vmlinux);
	for (int i = 0; i < NR_PROGRAMS; i++) {
		if (!choices[i].how) {
			errmsg(NULL, "kernel lacks tracepoint %s:%s%s, which it needs",
			       choices[i].group, choices[i].tracepoint,
			       choices[i].function ? ", nor its function in BTF for fentry" : "");
			missing++;
		}
		attach_choice_set_autoload(&choices[i], true);
	}
	skel->rodata->get_pages_takes_count =
		!kernel_param_is_pointer(vmlinux, "filemap_get_pages", 1);
	/* v6.1: a fault's VMA is read from it (vma_lookup.bpf.h). */
	if (btf__find_by_name_kind(vmlinux, "maple_tree", BTF_KIND_STRUCT) < 0) {
		errmsg(NULL, "the kernel lacks the maple tree of VMAs (v6.1), which it needs");
		missing++;
	}
	btf__free(vmlinux);
	return missing ? -1 : 0;
}

static bool verbose;

static int libbpf_print(enum libbpf_print_level level, const char *format, va_list args)
{
	va_list copy;

	if (level != LIBBPF_DEBUG) {
		va_copy(copy, args);
		load_failure_note(format, copy);
		va_end(copy);
	}
	return verbose ? vfprintf(stderr, format, args) : 0;
}

/* --budget: the configuration being measured (NULL: not measuring), and the programs over. */
static const char *budget_config;
static int budget_over;

static struct cache_bpf *open_and_load(const struct cache_load_options *o, bool use_btf, int *err)
{
	struct attach_choice choices[NR_PROGRAMS];
	struct cache_bpf *skel = cache_bpf__open();

	if (!skel) {
		*err = -errno;
		errmsg("opening BPF object", "%s", errmsg_strerror(errno));
		return NULL;
	}
	if (select_programs(skel, choices, use_btf)) {
		*err = -ENOENT;
		goto fail;
	}
	skel->rodata->trace_all = o->all;
	skel->rodata->follow_children = true;
	if (o->cgroup) {
		skel->rodata->trace_cgroup = true;
		skel->bss->target_cgroup_id = o->cgroup->id;
		skel->bss->target_cgroup_level = o->cgroup->level;
		skel->data->target_cgroup_subsys = o->cgroup->subsys;
	}
	skel->rodata->per_process = o->per_process;
	skel->rodata->per_file = o->per_file;
	skel->rodata->per_cgroup = o->per_cgroup;
	skel->rodata->count_hits = true;
	skel->rodata->page_shift = __builtin_ctzl((unsigned long)sysconf(_SC_PAGESIZE));
	skel->rodata->use_bpf_loop = kernel_has_bpf_loop();
	if (!skel->rodata->use_bpf_loop) {
		errmsg(NULL, "the kernel lacks bpf_loop (v5.17), which it needs");
		*err = -ENOENT;
		goto fail;
	}
	skel->rodata->use_task_storage = thread_storage_fallback(skel->obj);
	if (budget_config && budget_prepare(skel->obj)) {
		*err = -ENOENT;
		goto fail;
	}
	*err = cache_bpf__load(skel);
	if (budget_config)
		budget_over += budget_report(stdout, skel->obj, !*err, budget_config, o->all ?
					     "cachestat" : "-c", use_btf ? "tp_btf" : "raw_tp");
	if (!*err) {
		if (verbose)
			attach_choice_print(stderr, program_invocation_short_name, choices,
					    NR_PROGRAMS, NULL);
		return skel;
	}
fail:
	cache_bpf__destroy(skel);
	return NULL;
}

int cache_budget(bool verbose_)
{
	/* cachestat's counters, and cachetop -c's: per process and per file. */
	static const struct cache_load_options configs[] = {
		{ .all = true },
		{ .per_process = true, .per_file = true },
	};
	int refused = 0, err;

	verbose = verbose_;
	libbpf_set_print(libbpf_print);
	budget_header(stdout);
	for (int btf = 1; btf >= 0; btf--) {
		for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
			struct cache_bpf *skel;

			budget_config = configs[i].all ? "cachestat" : "cachetop";
			skel = open_and_load(&configs[i], btf, &err);
			if (!skel && err == -ENOENT)
				printf("# %s %s: not loadable on this kernel (said above)\n",
				       budget_config, btf ? "tp_btf" : "raw_tp");
			else if (!skel)
				refused++;
			cache_bpf__destroy(skel);
		}
	}
	if (refused && load_failure_describe())
		errmsg("loading BPF programs", "the kernel refused %s", load_failure_describe());
	return budget_verdict(program_invocation_short_name, budget_over, refused);
}

struct cache_bpf *cache_load(const struct cache_load_options *o)
{
	struct cache_bpf *skel;
	int err = 0;

	verbose = o->verbose;
	libbpf_set_print(libbpf_print);
	skel = open_and_load(o, true, &err);
	if (!skel && err != -ENOENT)
		skel = open_and_load(o, false, &err);
	if (!skel) {
		if (err == -EPERM || (err == -EACCES && geteuid() != 0))
			errmsg("loading BPF programs", "%s: run as root (uid %d)",
			       errmsg_strerror(-err), (int)getuid());
		else if (err != -ENOENT && load_failure_describe())
			errmsg("loading BPF programs", "the kernel refused %s (rerun with -v for "
			       "the verifier's log)", load_failure_describe());
		else if (err != -ENOENT)
			errmsg("loading BPF programs", "%s (rerun with -v for the verifier's log)",
			       errmsg_strerror(-err));
		return NULL;
	}
	err = cache_bpf__attach(skel);
	if (err) {
		attach_failure_say(err, "it");
		cache_bpf__destroy(skel);
		return NULL;
	}
	return skel;
}

void cache_unload(struct cache_bpf *skel)
{
	cache_bpf__destroy(skel);
}

int cache_read_totals(struct cache_bpf *skel, __u64 totals[NR_CACHE_COUNTERS])
{
	int ncpus = libbpf_num_possible_cpus();
	__u64 *values;

	if (ncpus <= 0)
		return -1;
	values = calloc(ncpus, sizeof(*values));
	if (!values)
		return errmsg(NULL, "out of memory"), -1;
	for (__u32 slot = 0; slot < NR_CACHE_COUNTERS; slot++) {
		totals[slot] = 0;
		if (bpf_map__lookup_elem(skel->maps.totals, &slot, sizeof(slot), values,
					 sizeof(*values) * ncpus, 0))
			continue;
		for (int i = 0; i < ncpus; i++)
			totals[slot] += values[i];
	}
	free(values);
	return 0;
}

static int by_id(const void *a, const void *b)
{
	__u64 x = ((const struct cgroup_counts *)a)->id, y = ((const struct cgroup_counts *)b)->id;

	return x < y ? -1 : x > y;
}

int cache_read_cgroups(struct cache_bpf *skel, struct cgroup_counts **rows)
{
	struct bpf_map *map = skel->maps.cgroups;
	__u64 key, *prev = NULL;
	struct cgroup_counts row, *grown;
	int n = 0;

	*rows = NULL;
	while (!bpf_map__get_next_key(map, prev, &key, sizeof(key))) {
		row.id = key;
		prev = &row.id;		/* the cursor: @key until the next call */
		if (bpf_map__lookup_elem(map, &key, sizeof(key), &row.counts, sizeof(row.counts), 0))
			continue;	/* gone since the key was read */
		grown = reallocarray(*rows, n + 1, sizeof(**rows));
		if (!grown) {
			free(*rows);
			*rows = NULL;
			return errmsg(NULL, "out of memory"), -1;
		}
		*rows = grown;
		(*rows)[n++] = row;
	}
	qsort(*rows, n, sizeof(**rows), by_id);
	return n;
}

__u64 cache_lost(const __u64 totals[NR_CACHE_COUNTERS])
{
	__u64 lost = 0;

	for (int slot = CACHE_LOST_PAGE_STATE; slot < NR_CACHE_COUNTERS; slot++)
		lost += totals[slot];
	return lost;
}

void cache_report_lost(const __u64 t[NR_CACHE_COUNTERS])
{
	if (!cache_lost(t))
		return;
	errmsg(NULL, "%llu events LOST (page state map full: %llu, ranges too long: %llu, "
	       "bios too long: %llu, untracked children: %llu, names: %llu, processes: %llu, "
	       "files: %llu, faults unresolved: %llu, cgroups: %llu); the counts are incomplete",
	       (unsigned long long)cache_lost(t), (unsigned long long)t[CACHE_LOST_PAGE_STATE],
	       (unsigned long long)t[CACHE_LOST_LONG_RANGE], (unsigned long long)t[CACHE_LOST_LONG_BIO],
	       (unsigned long long)t[CACHE_LOST_TASKS], (unsigned long long)t[CACHE_LOST_PATH],
	       (unsigned long long)t[CACHE_LOST_PROCESS], (unsigned long long)t[CACHE_LOST_FILE],
	       (unsigned long long)t[CACHE_LOST_FAULT], (unsigned long long)t[CACHE_LOST_CGROUP]);
}

double read_hit_ratio(__u64 hits, __u64 misses)
{
	return hits + misses ? (double)hits / (double)(hits + misses) : 0.0;
}

static int parse_interval(const char *text, double *seconds)
{
	char *end;

	errno = 0;
	*seconds = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(*seconds) || *seconds <= 0 || *seconds > 86400) {
		errmsg("INTERVAL", "'%s' is not a number of seconds above 0", text);
		return -1;
	}
	return 0;
}

static int parse_count(const char *text, unsigned long *count)
{
	char *end;

	errno = 0;
	*count = strtoul(text, &end, 10);
	if (errno || end == text || *end || *count == 0 || text[0] == '-') {
		errmsg("COUNT", "'%s' is not a whole number above 0", text);
		return -1;
	}
	return 0;
}

void interval_argument(struct argp_state *state, struct interval_args *args, const char *text)
{
	int bad;

	if (args->given >= 2)
		argp_error(state, "too many arguments: %s", text);
	bad = args->given == 0 ? parse_interval(text, &args->seconds) :
				 parse_count(text, &args->count);
	args->given++;
	if (bad)
		exit(2);	/* said by the parser */
}
