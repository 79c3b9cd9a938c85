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
 * (struct page_chunk), so that a program re-reading a cached file costs no
 * record and no memory beyond the first pass. A full map is reported through
 * on_state_full(), never dropped silently.
 *
 * The map_pages tracepoint gives only the range fault-around tried. Which
 * page faulted comes from exceptions:page_fault_user/kernel (the address)
 * and its VMA (its file page: vma_lookup.bpf.h); which pages it really
 * mapped comes from the page cache itself, read the way filemap_map_pages()
 * does (present, uptodate, unlocked, no readahead mark).
 *
 * The includer defines five hooks (declared below) and calls the
 * page_access_*() entry points from its tracepoint programs, after its own
 * filter (traced tasks).
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
#include "process_vmas.bpf.h"

const volatile __u32 page_shift = 12;
/*
 * cachestat/cachetop: tell hits from misses. Needs the pending bits (set by
 * reads from storage) and a look at the page cache on every read call.
 * trace --used needs only first accesses and mapped pages.
 */
const volatile bool count_hits = false;
/*
 * Kernels before v5.17 "bpf: Add bpf_loop helper" have no bpf_loop; user
 * space probes for it. The walks here need it (unrolled, they are too many
 * states for the verifier): user space refuses page accesses without it.
 */
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

/* FAULT_DEFERRED: its fault-around waits for its VMA (defer_map()), and is resolved with it. */
enum fault_state { FAULT_NONE, FAULT_STARTED, FAULT_RESOLVED, FAULT_DEFERRED };

/* A fault-around whose VMA lookup failed (defer_map()). */
struct deferred_map {
	__u64 address;		/* its fault's; 0: a free slot */
	__u64 mapping, start, end;
	__u64 account;		/* its fault's page is the fault's access (not filemap_fault's) */
	__u64 found;		/* its VMA found: index and mapped are set */
	__u64 index;		/* its fault's page */
	__u64 mapped;		/* of its pages, from start on, those the page tables map */
	/* Scratch of the functions that resolve it, off the stack (512 bytes before v6.13). */
	struct page_chunk_key key;
	__u64 byte_read;
};

#define DEFERRED_MAPS	32
/*
 * Silent faults and filemap_fault()-served folios kept for the next system
 * call (defer_silent()). Sixteen: a random script's step touches up to 8
 * pages with no system call between them (tests/cachefuzz.py); with eight,
 * 5 were counted lost in one batch of 100 scripts on 7.3.
 */
#define DEFERRED_SILENT	16

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
	__u64 anon_start;	/* the last anonymous VMA a silent fault was in */
	__u64 anon_end;
	__u64 anon_mapping_calls; /* mapping_calls when it was looked up (see there) */
	__u64 lookup_mapping_calls; /* resolve_silent()'s, off the stack */
	/* Silent faults whose VMA was busy at the next fault (resolve_silent()); 0: free. */
	__u64 deferred_addresses[DEFERRED_SILENT];
	struct page_chunk_key silent_key; /* resolve_silent()'s, off the stack */
	__u32 fault_folio_check; /* filemap_fault served it: its folio may be mapped whole */
	__u64 vma_mapping;	/* the last file VMA a lookup found, or mmap made */
	__u64 vma_start, vma_end, vma_pgoff;
	__u64 vma_calls;	/* mapping_calls for which it is known current, else NO_CALLS */
	__u64 vma_lookup_calls;	/* mapping_calls when the lookup in progress began (off the stack) */
	__u64 mmap_calls;	/* mapping_calls counting the thread's call in progress */
	__u64 mmap_mapping;	/* an mmap of a file in progress (page_access_mmap_starts()) */
	__u64 mmap_pgoff, mmap_bytes;
	struct deferred_map deferred_maps[DEFERRED_MAPS]; /* see defer_map() */
	__u32 nr_deferred_maps;
	__u32 deferred_slot;	/* FAULT_DEFERRED: the fault's slot */
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
/* A fault whose page could not be told: its VMA was never found (mmap lock busy). */
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
#include "fault_around.bpf.h"
#include "fault_state.bpf.h"

#endif /* PAGETRACE_PAGE_ACCESS_BPF_H */
