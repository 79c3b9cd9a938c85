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
	CACHE_LOST_LONG_RANGE,	/* a range not walked: longer than a walk reaches, or nested (scratch.bpf.h) */
	CACHE_LOST_LONG_BIO,	/* a bio not walked whole: longer than a walk reaches, or nested */
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

/* cachetop --by cgroup: a cgroup seen (again) with its directory's name,
 * sent when its entry is made, so that one that is gone by the time its row
 * is printed (a container that ran and exited) can still be named. */
#define CGROUP_EVENT_KIND	3
#define CGROUP_NAME_LEN		128

struct cgroup_event {
	__u32 kind;		/* CGROUP_EVENT_KIND */
	__u32 pad;
	__u64 id;		/* cgroup2 id */
	char name[CGROUP_NAME_LEN];	/* the last component of its path */
};

#endif /* PAGETRACE_CACHE_H */
