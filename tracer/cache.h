/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What cachestat and cachetop share between their kernel side (cache.bpf.c)
 * and their user sides (cachestat.c, cachetop.c, cache_load.c).
 */
#ifndef PAGETRACE_CACHE_H
#define PAGETRACE_CACHE_H

#include "file_path.h"
#include "page_access.h"

/* Slots of the per-CPU totals map. */
enum cache_counter {
	CACHE_HITS,
	CACHE_MISSES,
	CACHE_DIRTIES,		/* pages that turned dirty (writes) */
	CACHE_MAPPED,		/* pages fault-around mapped without a fault on them */
	CACHE_LOST_PAGE_STATE,	/* page state map full: a miss may count as a hit */
	CACHE_LOST_LONG_RANGE,	/* a range longer than a walk reaches */
	CACHE_LOST_LONG_BIO,	/* a bio longer than a walk reaches */
	CACHE_LOST_TASKS,	/* a child not followed: tasks map full */
	CACHE_LOST_PATH,	/* a file name not sent: ring buffer full */
	CACHE_LOST_PROCESS,	/* per-process map full */
	CACHE_LOST_FILE,	/* per-file map full */
	CACHE_LOST_FAULT,	/* a fault whose VMA was never found (mmap lock busy) */
	CACHE_LOST_CGROUP,	/* per-cgroup map full */
	NR_CACHE_COUNTERS,
};

struct cache_counts {
	__u64 hits;
	__u64 misses;
	__u64 dirties;
	__u64 mapped;
};

struct process_counts {
	struct cache_counts counts;
	__u32 uid;
	__u32 pad;
	char comm[TASK_COMM_LEN];
};

#endif /* PAGETRACE_CACHE_H */
