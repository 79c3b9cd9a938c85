// SPDX-License-Identifier: GPL-2.0
/*
 * cache_load: what cachestat and cachetop share on the user side. Owns
 * cache.bpf.c's table for the engine loader (engine_load.h: its attach
 * points and rodata) and its --budget configurations, reading the totals,
 * the lost-event report and the options both tools take (INTERVAL, COUNT,
 * -j, -v, and target_options.c's), with their --version.
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
#include "bpf_cost.h"
#include "engine_load.h"

#define NR_PROGRAMS 14

/* Every attach point; the faults' either from the fault events or from the PTE hooks. */
ENGINE_SKELETON(cache, NR_PROGRAMS,
	ATTACH_BIO_AND_TASKS(p),
	ATTACH_TRACEPOINT(p, "writeback_dirty_folio", "writeback", dirty),
	ATTACH_READS_AND_FAULTS(p),
	ATTACH_PAGE_ACCESS(p),
	ATTACH_PTE_HOOKS(p));

/* mm_filemap_fault; map_pages, the fault tracepoints and sys_enter; the PTE hooks. */
enum { ROW_FAULT = 4, ROW_MAP_PAGES = 6, ROW_SYS_ENTER = 9, ROW_PTE_HOOKS = 10 };

/* Is row @i one of the fault events' rows? */
static bool fault_event_row(int i)
{
	return i == ROW_FAULT || (i >= ROW_MAP_PAGES && i <= ROW_SYS_ENTER);
}

/* The engine's select: every attach point is needed, the faults' from one source. */
static void select_programs(void *skel_, const struct attach_choice *c, struct engine_point *p,
			    const void *arg)
{
	struct cache_bpf *skel = skel_;
	bool pte_rows[PTE_HOOK_ROWS];
	bool ptes = attach_choice_faults_from_ptes(&c[ROW_PTE_HOOKS], pte_rows);

	(void)arg;
	skel->rodata->faults_from_ptes = ptes;
	for (int i = 0; i < NR_PROGRAMS; i++) {
		bool wanted = i >= ROW_PTE_HOOKS ? pte_rows[i - ROW_PTE_HOOKS] :
			      !(ptes && fault_event_row(i));

		p[i] = (struct engine_point){ .load = wanted, .needed_by = wanted ? "it" : NULL };
	}
}

/* The engine's configure: the rodata from @arg, a struct cache_load_options. */
static int configure(void *skel_, const struct btf *vmlinux, const void *arg)
{
	const struct cache_load_options *o = arg;
	struct cache_bpf *skel = skel_;

	skel->rodata->get_pages_takes_count =
		!kernel_param_is_pointer(vmlinux, "filemap_get_pages", 1);
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
	if (!skel->rodata->use_bpf_loop)
		return errmsg(NULL, "the kernel lacks bpf_loop (v5.17), which it needs"), -ENOENT;
	skel->rodata->use_task_storage = thread_storage_fallback(skel->obj);
	return 0;
}

/* The table: cache.bpf.c, its attach points, its setup. */
static struct engine engine = {
	ENGINE_OF(cache),
	.select = select_programs,
	.configure = configure,
	.may_split = true,
};

int cache_budget(bool verbose)
{
	/* cachestat's counters, and cachetop -c's: per process and per file. */
	static const struct cache_load_options cachestat = { .all = true },
		cachetop = { .per_process = true, .per_file = true };
	static const struct engine_config configs[] = {
		{ "cachestat", "cachestat", &cachestat, false },
		{ "cachetop", "-c", &cachetop, false },
	};

	engine.tool = program_invocation_short_name;
	engine.verbose = verbose;
	return engine_budget(&engine, configs, sizeof(configs) / sizeof(configs[0]));
}

struct cache_bpf *cache_load(const struct cache_load_options *o)
{
	struct cache_bpf *skel;
	int err;

	engine.tool = program_invocation_short_name;
	engine.verbose = o->verbose;
	skel = engine_load(&engine, o, ENGINE_AUTO);
	if (!skel)
		return NULL;
	/* Before attaching: every run of the programs counted (bpf_cost.h). */
	cost_stats_start(!o->cost);
	err = engine_attach(&engine);
	if (err) {
		attach_failure_say(err, "it");
		cache_unload(skel);
		return NULL;
	}
	return skel;
}

void cache_unload(struct cache_bpf *skel)
{
	(void)skel;	/* the engine's */
	engine_unload(&engine);
	cost_stats_stop();
}

void cache_cost(struct cache_bpf *skel, struct bpf_cost *cost)
{
	(void)skel;
	engine_cost(&engine, cost);
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

/* Bad usage exits 2, as both tools' pages say, not argp's default 64. */
error_t argp_err_exit_status = 2;

/* --version: "cachestat (pagetrace) VERSION", installed as pagetrace-cachestat or not. */
static void print_version(FILE *f, struct argp_state *state)
{
	const char *name = program_invocation_short_name;

	(void)state;
	if (!strncmp(name, "pagetrace-", strlen("pagetrace-")))
		name += strlen("pagetrace-");
	fprintf(f, "%s (pagetrace) %s\n", name, PAGETRACE_VERSION);
}

void (*argp_program_version_hook)(FILE *, struct argp_state *) = print_version;

/* The next positional argument: INTERVAL, then COUNT. */
static void interval_argument(struct argp_state *state, struct interval_args *args,
			      const char *text)
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

/* cache_options: cache_options.tsv's (docs/option-tables.md). */
#include "cache_options_table.h"

static error_t parse_cache_args(int key, char *arg, struct argp_state *state)
{
	struct cache_args *args = state->input;

	switch (key) {
	case ARGP_KEY_INIT:
		args->every.seconds = 1.0;
		state->child_inputs[0] = &args->target;
		break;
	case 'j': args->json = true; break;
	case 'v': args->verbose = true; break;
	case ARGP_KEY_ARG: interval_argument(state, &args->every, arg); break;
	default: return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static const struct argp_child with_pid[] = { { &target_argp, 0, NULL, 0 }, {} };
static const struct argp_child without_pid[] = { { &target_argp_no_pid, 0, NULL, 0 }, {} };
const struct argp cache_args_argp = { cache_options, parse_cache_args, NULL, NULL, with_pid,
				      NULL, NULL };
const struct argp cache_args_argp_no_pid = { cache_options, parse_cache_args, NULL, NULL,
					     without_pid, NULL, NULL };
