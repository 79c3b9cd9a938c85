/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Events shared by the kernel side (trace.bpf.c) and the user side (trace.c)
 * of the pagetrace tracer. Both sides include this one header, so the layout
 * can never drift apart.
 */
#ifndef PAGETRACE_TRACE_EVENTS_H
#define PAGETRACE_TRACE_EVENTS_H

#include "file_id.h"
#include "page_access.h"
#include "file_path.h"


enum event_kind {
	EVENT_PAGES = 1,	/* a run of pages of one file read from storage */
	EVENT_PATH = PATH_EVENT_KIND,	/* the name of a file, sent once per file */
	EVENT_MARKS = 3,	/* --used: first accesses or mappings in one chunk */
};

/* The record kind of a marks_event (docs/trace-format.md, version 2). */
enum record_kind {
	RECORD_ACCESS = 1,
	RECORD_MAP = 2,
};

/* Why a page was read; see docs/trace-format.md, column "cause". */
enum read_cause {
	CAUSE_UNKNOWN = 0,	/* readahead/filemap tracepoints not available */
	CAUSE_READ,		/* plain ->read_folio (no readahead window) */
	CAUSE_SYNC_RA,
	CAUSE_ASYNC_RA,
	CAUSE_FORCED_RA,	/* readahead(2), WILLNEED, ra disabled */
	CAUSE_FAULT,		/* mmap fault and fault read-around */
	CAUSE_METADATA,		/* no regular file's page: file id is {device, 0, 0} */
};

/* Slots of the per-CPU counters map. */
enum counter {
	COUNTER_LOST_RINGBUF,	/* page events dropped: ring buffer full */
	COUNTER_LOST_PATH,	/* path events dropped: ring buffer full */
	COUNTER_LOST_LONG_BIO,	/* bios not walked whole: longer than a walk reaches, or nested (scratch.bpf.h) */
	COUNTER_LOST_TASKS,	/* children not followed: tasks map full */
	COUNTER_LOST_PAGE_STATE, /* --used: page state map full */
	COUNTER_LOST_LONG_RANGE, /* --used: a range not walked: longer than a walk reaches, or nested (scratch.bpf.h) */
	COUNTER_LOST_FAULT,	/* --used: a fault whose VMA was never found (mmap lock busy) */
	NR_COUNTERS,
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

/* --used: pages of one 64-page chunk accessed or mapped for the first time. */
struct marks_event {
	__u32 kind;		/* EVENT_MARKS */
	__u32 record;		/* enum record_kind */
	__u64 ts_ns;		/* CLOCK_MONOTONIC */
	struct file_id file;
	__u64 base;		/* first page of the chunk, in page-cache units */
	__u64 mask;		/* bit i: page base + i */
	__u32 pid;
	__u32 tid;
	__u32 how;		/* enum access_how */
	__u32 page_shift;
	char comm[TASK_COMM_LEN];
};

#endif /* PAGETRACE_TRACE_EVENTS_H */
