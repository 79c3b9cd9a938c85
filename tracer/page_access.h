/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types of the page-access bookkeeping (page_access.bpf.h) that user space
 * sees too: how a page was accessed, and the per-page state map.
 */
#ifndef PAGETRACE_PAGE_ACCESS_H
#define PAGETRACE_PAGE_ACCESS_H

#include "file_id.h"

/* Pages per page_states entry: one bit each in a __u64. */
#define CHUNK_SHIFT	6
#define CHUNK_PAGES	(1U << CHUNK_SHIFT)

/* How a page was accessed: the cause of access records (docs/trace-format.md,
 * "Version 2: record kinds"). */
enum access_how {
	ACCESS_BY_READ = 1,	/* read, pread, readv, sendfile, splice */
	ACCESS_BY_FAULT = 2,	/* an mmap page fault; also "map" records */
};

struct page_chunk_key {
	struct file_id file;
	__u64 chunk;		/* page index >> CHUNK_SHIFT */
};

/* One bit per page of the chunk. */
struct page_chunk {
	__u64 pending;		/* read from storage, not accessed since (hit/miss) */
	__u64 accessed;		/* accessed at least once while tracing */
	__u64 mapped;		/* mapped by fault-around, before any access */
};

#endif /* PAGETRACE_PAGE_ACCESS_H */
