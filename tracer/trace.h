/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Events shared by the kernel side (trace.bpf.c) and the user side (trace.c)
 * of the pagetrace tracer. Both sides include this one header, so the layout
 * can never drift apart.
 */
#ifndef PAGETRACE_TRACE_H
#define PAGETRACE_TRACE_H

#define TASK_COMM_LEN		16
/* Path components the kernel walks up from a file before giving up. */
#define PATH_MAX_DEPTH		32
/* NAME_MAX + 1 */
#define PATH_NAME_LEN		256
/*
 * Bio vector entries walked per bio. BIO_MAX_VECS is 256; a longer walk
 * (a cloned bio whose iterator starts late) is counted as lost.
 */
#define MAX_BVECS		256

enum event_kind {
	EVENT_PAGES = 1,	/* a run of pages of one file read from storage */
	EVENT_PATH = 2,		/* the name of a file, sent once per file */
};

/* Why a page was read; see docs/trace-format.md, column "cause". */
enum read_cause {
	CAUSE_UNKNOWN = 0,	/* readahead/filemap tracepoints not available */
	CAUSE_READ,		/* plain ->read_folio (no readahead window) */
	CAUSE_SYNC_RA,
	CAUSE_ASYNC_RA,
	CAUSE_FORCED_RA,	/* readahead(2), WILLNEED, ra disabled */
	CAUSE_FAULT,		/* mmap fault and fault read-around */
};

/* Slots of the per-CPU counters map. */
enum counter {
	COUNTER_LOST_RINGBUF,	/* page events dropped: ring buffer full */
	COUNTER_LOST_PATH,	/* path events dropped: ring buffer full */
	COUNTER_LOST_LONG_BIO,	/* bios with more than MAX_BVECS vectors */
	COUNTER_LOST_TASKS,	/* children not followed: tasks map full */
	COUNTER_BIOS,		/* read bios that carried file pages */
	NR_COUNTERS,
};

/* Identity of a file: stable while the file exists, cheap to compare. */
struct file_id {
	__u32 dev;		/* kernel dev_t: major << 20 | minor */
	__u32 generation;	/* tells reused inode numbers apart */
	__u64 ino;
};

struct pages_event {
	__u32 kind;		/* EVENT_PAGES */
	__u32 nr_pages;
	__u64 ts_ns;		/* CLOCK_MONOTONIC, when the bio was queued */
	struct file_id file;
	__u64 index;		/* first page, in page-cache units */
	__u32 pid;
	__u32 tid;
	__u32 cause;		/* enum read_cause */
	__u32 page_shift;
	char comm[TASK_COMM_LEN];
};

#define PATH_DELETED	(1U << 0)	/* i_nlink was 0: file unlinked */
#define PATH_TOO_DEEP	(1U << 1)	/* more than PATH_MAX_DEPTH levels */
#define PATH_NO_DENTRY	(1U << 2)	/* inode had no dentry alias */

struct path_event {
	__u32 kind;		/* EVENT_PATH */
	__u32 depth;		/* components filled in names[], leaf first */
	struct file_id file;
	__u32 flags;		/* PATH_* */
	__u32 pad;
	char names[PATH_MAX_DEPTH][PATH_NAME_LEN];
};

#endif /* PAGETRACE_TRACE_H */
