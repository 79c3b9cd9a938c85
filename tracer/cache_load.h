/* SPDX-License-Identifier: GPL-2.0 */
/* cache_load.c: loading cache.bpf.c and reading its totals, for cachestat and cachetop. */
#ifndef PAGETRACE_CACHE_LOAD_H
#define PAGETRACE_CACHE_LOAD_H

#include <stdbool.h>
#include <linux/types.h>
#include "cache.h"
#include "cgroup.h"
#include "target_options.h"

struct cache_bpf;

struct cache_load_options {
	bool all;		/* every task, or only those put in traced_tids */
	const struct cgroup_target *cgroup;	/* --cgroup: its tasks only, else NULL */
	bool per_process;
	bool per_file;
	bool per_cgroup;	/* counts per cgroup2 id */
	bool verbose;		/* libbpf's messages */
	bool cost;		/* BPF run-time statistics on: the tool reports its cost */
};

/* open -> rodata -> load (tp_btf, else raw_tp) -> attach; errors said. */
struct cache_bpf *cache_load(const struct cache_load_options *options);
void cache_unload(struct cache_bpf *skel);
/* The programs' run time so far (bpf_cost.h; statistics on from cache_load()
 * when options.cost: kept on for a monitor's life, they would tax every BPF
 * program of the host). */
struct bpf_cost;
void cache_cost(struct cache_bpf *skel, struct bpf_cost *cost);
/*
 * --budget (bpf_budget.h): load, never attach, cachestat's and cachetop -c's
 * programs, with tp_btf and with raw_tp; one row a program. The exit status.
 */
int cache_budget(bool verbose);

/* The per-CPU totals, summed. */
int cache_read_totals(struct cache_bpf *skel, __u64 totals[NR_CACHE_COUNTERS]);
/* One cgroup2 cgroup's counts since the start (options.per_cgroup). */
struct cgroup_counts {
	__u64 id;
	struct cache_counts counts;
};
/* Every cgroup's counts, in order of id, into *@rows (malloc'd): their
 * number, or -1 said on stderr. */
int cache_read_cgroups(struct cache_bpf *skel, struct cgroup_counts **rows);

/* Events lost, from the totals; and a line saying which, on stderr. */
__u64 cache_lost(const __u64 totals[NR_CACHE_COUNTERS]);
void cache_report_lost(const __u64 totals[NR_CACHE_COUNTERS]);

/* hits / (hits + misses), 0 when there was no access. */
double read_hit_ratio(__u64 hits, __u64 misses);

/* The [INTERVAL [COUNT]] arguments of both tools. */
struct interval_args {
	double seconds;		/* INTERVAL, > 0 (default 1) */
	unsigned long count;	/* COUNT, > 0; 0: until interrupted */
	int given;		/* how many of the two were given */
};

/* What both tools take: [INTERVAL [COUNT]], -j, -v and the target options. */
struct cache_args {
	struct interval_args every;
	bool json;		/* -j */
	bool verbose;		/* -v */
	struct target target;	/* -p (cachetop), --cgroup, --container */
};

/* Their argp child, its input a struct cache_args (handed over by the
 * parent at ARGP_KEY_INIT); with target_options.h's (cachestat: without
 * -p). A bad INTERVAL or COUNT is said in one line and exits 2, as argp
 * does for bad usage; a third is argp_error. */
extern const struct argp cache_args_argp, cache_args_argp_no_pid;

#endif /* PAGETRACE_CACHE_LOAD_H */
