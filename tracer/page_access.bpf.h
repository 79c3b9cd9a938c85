/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Page accesses and page state, shared by trace --used, cachestat and
 * cachetop. Words as in docs/trace-format.md and docs/tracer.md:
 *
 *   access  a page that a read, pread, readv, sendfile or splice asked for
 *           (filemap:mm_filemap_get_pages, clamped to the file size), or the
 *           faulting page of an mmap page fault, one page per fault
 *           (filemap:mm_filemap_fault when the fault goes to the filesystem,
 *           filemap:mm_filemap_map_pages when fault-around serves it);
 *   mapped  a page that fault-around mapped without a fault on it;
 *   miss    the first access to a page read from storage while tracing;
 *   hit     every other access.
 *
 * State per page lives in page_states, one entry per 64 pages of a file
 * (struct page_chunk): a program re-reading a cached file costs no record
 * and no memory beyond the first pass. A full map is reported through
 * on_state_full(), never dropped silently.
 *
 * Which page faulted comes from the fault's address and its VMA, and which
 * pages a fault mapped from the faulting thread's page tables, both read
 * during the fault (docs/fault-path.md).
 *
 * The includer defines five hooks (declared below) and calls the
 * page_access_*() entry points from its programs, after its own filter
 * (traced tasks).
 */
#ifndef PAGETRACE_PAGE_ACCESS_BPF_H
#define PAGETRACE_PAGE_ACCESS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "page_access.h"
#include "core_fixes.bpf.h"
#include "thread_storage.bpf.h"
#include "scratch.bpf.h"

const volatile __u32 page_shift = 12;
/* cachestat/cachetop: tell hits from misses (pending bits, the cache at every read call). */
const volatile bool count_hits = false;
/* v5.17 "bpf: Add bpf_loop helper": the walks here need it; user space refuses them without. */
const volatile bool use_bpf_loop = true;

/* Chunks of one range walked with bpf_loop: 2^16 * 64 pages, 16 GiB. */
#define MAX_CHUNKS		(1U << 16)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 18);	/* user space may resize */
	__type(key, struct page_chunk_key);
	__type(value, struct page_chunk);
} page_states SEC(".maps");

/* FAULT_RESOLVED: the fault's page is counted (fault_mapping, fault_index). */
enum fault_state { FAULT_NONE, FAULT_STARTED, FAULT_RESOLVED };

/* thread_access.fault_flags */
#define FAULT_EXPECTS_READ	1	/* its page was absent: the read that follows is its miss */
#define FAULT_MAPPED_FILE	2	/* it changed the file pages mapped (kmem:rss_stat) */

/* What one thread is doing: its read call, its page fault, and that fault's VMA. */
struct thread_access {
	__u64 call_mapping;	/* latest mm_filemap_get_pages of a read call */
	__u64 call_last;	/* its last page as asked, before clamping */
	__u64 call_index;	/* its first page */
	__u64 call_counted;	/* pages of the call below this are counted */
	__u64 syscall_mapping;	/* a read system call's file, until its first batch */
	__u64 syscall_first;	/* its first page */
	__u64 syscall_last;	/* its last page, as mm_filemap_get_pages will give it */
	__u32 call_in_syscall;	/* the call is a read system call seen at its entry */
	__u32 fault_state;	/* enum fault_state */
	__u64 fault_address;	/* its page, set at page_fault_user/kernel */
	__u64 fault_mapping;	/* FAULT_RESOLVED: the page the fault accessed */
	__u64 fault_index;
	__u32 fault_flags;	/* FAULT_* */
	__u32 vma_seq;		/* mm->mm_lock_seq when the VMA was read */
	__u64 vma_mm;		/* the VMA's address space; 0: none read */
	__u64 vma_start, vma_end, vma_pgoff;
	__u64 vma_mapping;	/* its file's; 0: an anonymous VMA */
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

/* Hooks, defined by the includer. @key names the file and the chunk. */
static __always_inline void on_access(struct inode *inode, const struct page_chunk_key *key,
				      __u64 first_mask, __u32 hits, __u32 misses, __u32 how);
static __always_inline void on_map(struct inode *inode, const struct page_chunk_key *key,
				   __u64 new_mask);
static __always_inline void on_state_full(void);
static __always_inline void on_walk_cut_short(void);
/* What a fault accessed or mapped could not be read (docs/fault-path.md). */
static __always_inline void on_fault_lost(void);

static __always_inline void file_id_of(struct inode *inode, struct file_id *id)
{
	struct super_block *sb;

	/* One helper call for the inode's three fields where they fit (core_fixes). */
	if (read_inode_id_words(inode, &sb, &id->ino, &id->generation)) {
		id->dev = BPF_CORE_READ(sb, s_dev);
		return;
	}
	id->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	id->generation = BPF_CORE_READ(inode, i_generation);
	id->ino = BPF_CORE_READ(inode, i_ino);
}

static __always_inline __u32 popcount64(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (__u32)((x * 0x0101010101010101ULL) >> 56);
}

/* 1 + the highest set bit of @x, 0 for 0 (LLVM 14's BPF backend has no ctlz). */
static __always_inline __u32 fls64(__u64 x)
{
	x |= x >> 1;
	x |= x >> 2;
	x |= x >> 4;
	x |= x >> 8;
	x |= x >> 16;
	x |= x >> 32;
	return popcount64(x);
}

/* Bits of chunk @chunk that fall in the pages [first, last]. */
static __always_inline __u64 range_mask(__u64 chunk, __u64 first, __u64 last)
{
	__u64 base = chunk << CHUNK_SHIFT;
	__u64 lo = first > base ? first - base : 0;
	__u64 hi = last < base + CHUNK_PAGES - 1 ? last - base : CHUNK_PAGES - 1;
	__u64 upper = hi >= 63 ? ~0ULL : (1ULL << (hi + 1)) - 1;

	if (lo > 63)
		return 0;
	return upper & ~((1ULL << lo) - 1);
}

/* The parts, in this order: each uses what the ones before define. */
#include "page_cache_walk.bpf.h"
#include "read_calls.bpf.h"
#include "vma_lookup.bpf.h"
#include "fault_state.bpf.h"

#endif /* PAGETRACE_PAGE_ACCESS_BPF_H */
