/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The sink interface: what the shared BPF modules hand to the tool they
 * are built into. Each tool's .bpf.c (trace.bpf.c, cache.bpf.c) defines
 * every function declared here: trace turns accesses and runs into
 * records, cachestat and cachetop into counts. The modules
 * include this header, never their includer, so no module depends on the
 * file that includes it.
 *
 * All are static __always_inline: inlined at each call, they cost the
 * verifier what the code they stand for costs. The modules compile alone
 * (`make check-headers`), where nothing defines them: the undefined-
 * internal warning is off for these declarations only. A .bpf.c that left
 * one undefined would keep a call to an undefined symbol in its object:
 * tests/test_bpf_modules.py fails on any.
 */
#ifndef PAGETRACE_SINKS_BPF_H
#define PAGETRACE_SINKS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "page_access.h"

struct bio_walk;

/* What an access found in one chunk (on_access()). */
struct chunk_access {
	__u64 first;		/* pages accessed for the first time while tracing */
	__u32 hits;
	__u32 misses;
	__u32 how;		/* enum access_how */
};

#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wundefined-internal"

/* page_access.bpf.h. @key names the file and the chunk. */
/* Pages of the chunk accessed (five arguments at most: a BPF call's). */
static __always_inline void on_access(struct inode *inode, const struct page_chunk_key *key,
				      const struct chunk_access *access);
/* Pages of the chunk that fault-around mapped, first seen mapped. */
static __always_inline void on_map(struct inode *inode, const struct page_chunk_key *key,
				   __u64 new_mask);
/* page_states was full: a chunk's state was not kept. */
static __always_inline void on_state_full(void);
/* A range longer than MAX_CHUNKS chunks: the rest was not walked. */
static __always_inline void on_walk_cut_short(void);
/* A fault whose page could not be told: its VMA was never found (mmap lock
 * busy), or a filemap function's call or return was missed. */
static __always_inline void on_fault_lost(void);

/* bio_pages.bpf.h: a run of pages read from storage (walk->run); called as
 * the walk moves on, and by the caller for the last run after walk_bio(). */
static __always_inline void on_read_run(struct bio_walk *walk);

/* file_path.bpf.h: the tool's ring buffer, and its ring buffer full. */
static __always_inline void *events_reserve(__u64 size);
static __always_inline void events_submit(void *event);
static __always_inline void on_path_lost(void);

/* traced_tasks.bpf.h: traced_tids full; a thread seen traced for the first
 * time (at fork, or its first event). */
static __always_inline void on_task_lost(void);
static __always_inline void on_thread_traced(struct task_struct *task);

/* programs.bpf.h, filemap_kprobes.bpf.h: the filemap get_pages and fault
 * events, from their tracepoints or the functions that fire them. */
static __always_inline int handle_get_pages(struct address_space *mapping, __u64 index,
					    __u64 last);
static __always_inline int handle_fault(struct address_space *mapping, __u64 index);

#pragma clang diagnostic pop

#endif /* PAGETRACE_SINKS_BPF_H */
