/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The state of the page-access engine (page_access.bpf.h): per page, the
 * page_states map (one struct page_chunk per 64 pages of a file, so that
 * a program re-reading a cached file costs no record and no memory beyond
 * the first pass); per thread, struct thread_access (its read call, its
 * system call, its page fault in progress and its last VMAs). State only: the modules along the event path change it.
 */
#ifndef PAGETRACE_PAGE_STATE_BPF_H
#define PAGETRACE_PAGE_STATE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "page_access.h"
#include "thread_storage.bpf.h"

/*
 * cachestat/cachetop: tell hits from misses. Needs the pending bits (set by
 * reads from storage) and a look at the page cache on every read call.
 * trace --used needs only first accesses and mapped pages.
 */
const volatile bool count_hits = false;

/* Chunks of one range walked with bpf_loop: 2^16 * 64 pages, 16 GiB. */
#define MAX_CHUNKS		(1U << 16)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 18);	/* user space may resize */
	__type(key, struct page_chunk_key);
	__type(value, struct page_chunk);
} page_states SEC(".maps");

enum fault_state { FAULT_NONE, FAULT_STARTED, FAULT_RESOLVED };

/* A VMA a thread's lookup found: current while mapping_calls is @calls. */
struct thread_vma {
	__u64 mapping;		/* 0: an anonymous VMA */
	__u64 start, end, pgoff;
	__u64 calls;		/* mapping_calls when its lookup began */
};

/* A thread's last file VMA and its last anonymous one (thread_access.vma). */
enum { THREAD_VMA_FILE, THREAD_VMA_ANON, THREAD_VMAS };

/* What one thread is doing: its read call and its page fault in progress. */
struct thread_access {
	__u64 call_mapping;	/* latest mm_filemap_get_pages of a read call */
	__u64 call_last;	/* its last page as asked, before clamping */
	__u64 call_index;	/* its first page */
	__u64 call_counted;	/* pages of the call below this are counted */
	__u64 call_in_syscall;	/* the call is a read system call seen at its entry */
	__u64 syscall_mapping;	/* a read system call's file, until its first batch */
	__u64 syscall_first;	/* its first page */
	__u64 syscall_last;	/* its last page, as mm_filemap_get_pages will give it */
	__u64 fault_address;	/* set at page_fault_user/kernel */
	__u64 fault_mapping;	/* once resolved: the page the fault accessed */
	__u64 fault_index;
	__u32 fault_state;	/* enum fault_state */
	__u32 fault_expects_read; /* that page was absent: its read is this miss */
	struct page_chunk_key silent_key; /* resolve_silent()'s, off the stack */
	__u32 fault_folio_check; /* filemap_fault served it: its folio may be mapped whole */
	struct thread_vma vma[THREAD_VMAS]; /* the last of each kind a lookup found */
};

/* Task-local storage: no hashing on the fault path, freed with the thread. */
THREAD_STORAGE_MAP(thread_accesses, struct thread_access);
static const struct thread_access no_thread_access;

static __always_inline struct thread_access *thread_access(bool create)
{
	return thread_storage_get(&thread_accesses, &no_thread_access, create);
}

/* Room for one xarray node's slots, too big for the BPF stack. */
struct xa_slots {
	__u64 slot[64];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xa_slots);
} xa_slot_buf SEC(".maps");

#endif /* PAGETRACE_PAGE_STATE_BPF_H */
