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
 * and bpf_find_vma (its file page); which pages it really mapped comes from
 * the page cache itself, read the way filemap_map_pages() does (present,
 * uptodate, unlocked, no readahead mark).
 *
 * The includer defines four hooks (declared below) and calls the
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

#define DEFERRED_MAPS	8
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
	__u64 vma_mapping;	/* the last file VMA a fault-around's lookup found */
	__u64 vma_start, vma_end, vma_pgoff;
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

/* ------------------------------------------------------------------ */
/* The page cache, read as filemap_map_pages() reads it                */

/* include/linux/xarray.h: entry encodings (stable since v4.20). */
static __always_inline bool xa_entry_is_node(unsigned long e)
{
	return (e & 3) == 2 && e > 4096;
}

static __always_inline bool xa_entry_is_sibling(unsigned long e)
{
	return (e & 3) == 2 && e < ((63UL << 2) | 2);
}

static __always_inline bool xa_entry_is_folio(unsigned long e)
{
	return e && !(e & 3);	/* value (shadow) entries have bit 0 set */
}

/* next_uptodate_folio(): fault-around skips what is not uptodate, locked or marked for readahead. */
static __always_inline bool folio_mappable(unsigned long folio)
{
	unsigned long word = page_flags_word((const void *)folio);
	unsigned long uptodate = 1UL << bpf_core_enum_value(enum pageflags, PG_uptodate);
	unsigned long locked = 1UL << bpf_core_enum_value(enum pageflags, PG_locked);
	unsigned long readahead = 1UL << bpf_core_enum_value(enum pageflags, PG_readahead);

	return (word & uptodate) && !(word & (locked | readahead));
}

struct chunk_cache {
	__u64 present;		/* pages in the page cache */
	__u64 mappable;		/* of the bits asked for, those fault-around maps */
};

struct leaf_scan {
	struct xa_node *node;
	struct xa_slots *buf;	/* slots lo..lo+n-1 of the node, from buf->slot[0] */
	__u32 lo;
	__u64 want;
	struct chunk_cache *out;
};

/* One slot of a leaf node (a bpf_loop callback: 64 inlined slots are too many states). */
static long scan_leaf_slot(__u32 i, struct leaf_scan *scan)
{
	__u32 slot = scan->lo + i;
	__u64 index = i;
	unsigned long e;

	/* Keep the bound check and the access on one register, for the verifier. */
	barrier_var(index);
	if (index >= CHUNK_PAGES || slot >= CHUNK_PAGES)
		return 1;
	e = scan->buf->slot[index];
	if (xa_entry_is_sibling(e)) {	/* a large folio: its first slot may lie before lo */
		struct xa_node *node = scan->node;	/* ours: outside the CO-RE access below */

		bpf_core_read(&e, sizeof(e), &node->slots[(e >> 2) & 63]);
	}
	if (!xa_entry_is_folio(e))
		return 0;
	scan->out->present |= 1ULL << slot;
	if ((scan->want & (1ULL << slot)) && folio_mappable(e))
		scan->out->mappable |= 1ULL << slot;
	return 0;
}

/* Lowest set bit of @x (not 0), as an index. */
static __always_inline __u32 lowest_bit(__u64 x)
{
	return fls64(x & -x) - 1;
}

/* A leaf node: one slot per page of the chunk; only the slots of @span are read. */
static __always_inline void leaf_slots(struct xa_node *node, __u64 span, __u64 want,
				       struct chunk_cache *out)
{
	__u32 zero = 0, lo, n;
	struct leaf_scan scan = { .node = node, .want = want, .out = out };

	if (!span)
		return;
	lo = lowest_bit(span);
	n = fls64(span) - lo;
	if (lo > 63 || n < 1 || n > CHUNK_PAGES)
		return;
	scan.lo = lo;
	scan.buf = bpf_map_lookup_elem(&xa_slot_buf, &zero);
	if (!scan.buf || bpf_probe_read_kernel(scan.buf->slot, n * sizeof(__u64),
					       (void *)node + bpf_core_field_offset(struct xa_node, slots) +
					       lo * sizeof(__u64)))
		return;
	bpf_loop(n, scan_leaf_slot, &scan, 0);
}

/*
 * Down @mapping's xarray to chunk @chunk. XA_CHUNK_SIZE is 64, so a leaf
 * node covers exactly one chunk: returns it, or NULL with *entry what covers
 * the chunk from above (a folio of 64 pages or more, or 0), or with
 * *only_page_0 set, the one small folio that a tree without nodes holds, at
 * index 0 (*entry 0 for any other chunk).
 */
static __always_inline struct xa_node *chunk_leaf(struct address_space *mapping, __u64 chunk,
						  unsigned long *entry, bool *only_page_0)
{
	__u64 index = chunk << CHUNK_SHIFT;

	*entry = (unsigned long)BPF_CORE_READ(mapping, i_pages.xa_head);
	*only_page_0 = !xa_entry_is_node(*entry);
	if (*only_page_0) {
		if (chunk)
			*entry = 0;
		return NULL;
	}
	for (int level = 0; level < 8; level++) {
		struct xa_node *node = (struct xa_node *)(*entry - 2);
		__u32 shift = BPF_CORE_READ(node, shift);
		__u64 offset;

		/*
		 * Beyond the tree first, then the leaf: a root that is itself
		 * a leaf (shift 0, a file cached only below page 64) covers
		 * chunk 0 alone. Tested the other way round, chunk N > 0 read
		 * chunk 0's slots, and a fault on a cold page 64 * N + k
		 * counted a hit when page k was cached (issue 20: pages 3 and
		 * 1795 gave 1 hit and 1 miss).
		 */
		if (shift >= 64 || (level == 0 && (index >> shift) > 63))
			break;	/* beyond the tree */
		if (shift == 0)
			return node;
		offset = (index >> shift) & 63;
		bpf_core_read(entry, sizeof(*entry), &node->slots[offset]);
		if (xa_entry_is_sibling(*entry))
			bpf_core_read(entry, sizeof(*entry), &node->slots[(*entry >> 2) & 63]);
		if (!xa_entry_is_node(*entry))
			return NULL;
	}
	*entry = 0;
	return NULL;
}

/*
 * Which pages of @chunk (of those in @span) are in @mapping's page cache,
 * and which of @want fault-around would map.
 */
static __always_inline void chunk_in_cache(struct address_space *mapping, __u64 chunk,
					   __u64 span, __u64 want, struct chunk_cache *out)
{
	unsigned long entry;
	bool only_page_0;
	struct xa_node *leaf = chunk_leaf(mapping, chunk, &entry, &only_page_0);
	__u64 covered = only_page_0 ? 1 : ~0ULL;

	out->present = out->mappable = 0;
	if (leaf) {
		leaf_slots(leaf, span, want, out);
		return;
	}
	if (!xa_entry_is_folio(entry))
		return;
	out->present = covered;
	if ((want & covered) && folio_mappable(entry))
		out->mappable = want & covered;
}

/* The folio at page @index of @mapping, or 0. */
static __always_inline unsigned long folio_at(struct address_space *mapping, __u64 index)
{
	unsigned long entry;
	bool only_page_0;
	struct xa_node *leaf = chunk_leaf(mapping, index >> CHUNK_SHIFT, &entry, &only_page_0);

	if (leaf) {
		bpf_core_read(&entry, sizeof(entry), &leaf->slots[index & (CHUNK_PAGES - 1)]);
		if (xa_entry_is_sibling(entry))
			bpf_core_read(&entry, sizeof(entry), &leaf->slots[(entry >> 2) & 63]);
	} else if (only_page_0 && index) {
		entry = 0;
	}
	return xa_entry_is_folio(entry) ? entry : 0;
}

/* Is page @index of @mapping in the page cache (uptodate or not)? */
static __always_inline bool page_in_cache(struct address_space *mapping, __u64 index)
{
	__u64 bit = 1ULL << (index & (CHUNK_PAGES - 1));
	struct chunk_cache cache;

	chunk_in_cache(mapping, index >> CHUNK_SHIFT, bit, 0, &cache);
	return cache.present & bit;
}

/* ------------------------------------------------------------------ */
/* Walks over the chunks of a range                                    */

enum chunk_op { OP_READ_CALL, OP_FAULT, OP_MAP, OP_MAPPED_WHOLE };

struct chunk_walk {
	struct address_space *mapping;
	struct inode *inode;
	struct page_chunk_key key;
	__u64 first, last;	/* pages, inclusive */
	__u64 fault_index;	/* OP_MAP: the faulting page, or -1 */
	__u64 counted;		/* OP_READ_CALL with count_hits: next page to count */
	__u32 op;
	__u32 how;
	bool account_fault;	/* OP_MAP: the faulting page is this fault's access */
	bool served;		/* OP_MAP: fault-around mapped the faulting page */
	bool absent;		/* OP_FAULT: the page is not in the cache yet */
	__u64 vm_start, vm_pgoff; /* OP_MAPPED_WHOLE: the faulting VMA */
};

static __always_inline struct page_chunk *chunk_state(struct page_chunk_key *key, bool create)
{
	struct page_chunk *state = bpf_map_lookup_elem(&page_states, key);
	struct page_chunk fresh = {};
	long err;

	if (state || !create)
		return state;
	err = bpf_map_update_elem(&page_states, key, &fresh, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: another CPU was first */) {
		on_state_full();
		return NULL;
	}
	return bpf_map_lookup_elem(&page_states, key);
}

/* Mark @mask accessed; returns the pages accessed for the first time. */
static __always_inline __u64 mark_accessed(struct page_chunk *state, __u64 mask,
					   __u32 *hits, __u32 *misses)
{
	__u64 first = mask;
	__u32 missed = 0;

	if (state) {
		first = mask & ~state->accessed;
		missed = popcount64(mask & state->pending);
		state->pending &= ~mask;
		state->accessed |= mask;
	}
	*misses += missed;
	*hits += popcount64(mask) - missed;
	return first;
}

/*
 * A read call's pages. trace: all of them, at its first batch. With
 * count_hits: only the run of pages present from walk->counted on, which is
 * what this batch and the next ones copy; a page absent now is read and
 * counted at the call's next batch.
 */
static __always_inline int chunk_read_call(struct chunk_walk *walk, __u64 mask)
{
	struct page_chunk *state;
	struct chunk_cache cache;
	__u32 hits = 0, misses = 0;
	__u64 first, run;
	__u64 lo = walk->counted > (walk->key.chunk << CHUNK_SHIFT) ?
		   walk->counted - (walk->key.chunk << CHUNK_SHIFT) : 0;
	bool stop = false;

	if (count_hits) {
		if (lo > 63)
			return 0;
		chunk_in_cache(walk->mapping, walk->key.chunk, mask, 0, &cache);
		run = cache.present >> lo;
		run = (run & ~(run + 1)) << lo;	/* consecutive present pages from lo */
		stop = (run & mask) != (mask & ~((1ULL << lo) - 1));
		mask &= run;
		if (mask)
			walk->counted = (walk->key.chunk << CHUNK_SHIFT) + fls64(mask);
	}
	/*
	 * The cache tools too keep every accessed page: chunk_map() counts a
	 * page as mapped only if it was not accessed, and a hit left out of
	 * page_states (no state created for it) was later counted as mapped
	 * when fault-around reached it (issue 20, tests/cachefuzz.py).
	 */
	state = chunk_state(&walk->key, mask != 0);
	first = mark_accessed(state, mask, &hits, &misses);
	if (mask && (first || count_hits))
		on_access(walk->inode, &walk->key, first, hits, misses, ACCESS_BY_READ);
	return stop;
}

static __always_inline int chunk_fault(struct chunk_walk *walk, __u64 mask)
{
	struct page_chunk *state;
	struct chunk_cache cache;
	__u32 hits = 0, misses = 0;
	__u64 first;

	if (count_hits) {
		chunk_in_cache(walk->mapping, walk->key.chunk, mask, 0, &cache);
		walk->absent = !(cache.present & mask);
	}
	state = chunk_state(&walk->key, true);	/* see chunk_read_call() */
	first = mark_accessed(state, mask, &hits, &misses);
	if (walk->absent && !misses)
		hits = 0, misses = 1;	/* this fault reads it: a miss */
	on_access(walk->inode, &walk->key, first, hits, misses, ACCESS_BY_FAULT);
	return 1;
}

static __always_inline int chunk_map(struct chunk_walk *walk, __u64 mask)
{
	__u64 base = walk->key.chunk << CHUNK_SHIFT, fault_bit = 0, candidates, new_map, want = mask;
	struct page_chunk *state;
	struct chunk_cache cache;
	__u32 hits = 0, misses = 0;
	__u64 first;

	if (walk->fault_index >= base && walk->fault_index < base + CHUNK_PAGES)
		fault_bit = 1ULL << (walk->fault_index - base);
	state = chunk_state(&walk->key, false);
	if (state && !count_hits) {
		/* trace: pages already recorded need no look at the cache. */
		if (walk->account_fault && (state->accessed & fault_bit))
			walk->served = true;
		/*
		 * Not the faulting page when it is only mapped: mapped in
		 * another process's page tables, its fault here is an access
		 * that fault-around serves (issue 20, tests/cachefuzz.py).
		 */
		want &= ~(state->accessed | (state->mapped & ~fault_bit));
	}
	if (!want)
		return 0;
	chunk_in_cache(walk->mapping, walk->key.chunk, want, want, &cache);
	candidates = cache.mappable & ~fault_bit;
	if (!state)
		/* A fault served here is an access: kept by the cache tools too. */
		state = chunk_state(&walk->key, candidates || (cache.mappable & fault_bit));
	if (walk->account_fault && (cache.mappable & fault_bit)) {
		walk->served = true;
		first = mark_accessed(state, fault_bit, &hits, &misses);
		on_access(walk->inode, &walk->key, first, hits, misses, ACCESS_BY_FAULT);
	}
	if (!state)
		return 0;
	new_map = candidates & ~state->accessed & ~state->mapped;
	state->mapped |= new_map;
	if (new_map)
		on_map(walk->inode, &walk->key, new_map);
	return 0;
}

/*
 * Is @addr mapped in the current task's page tables? bpf_probe_read_user()
 * reads with page faults disabled (copy_from_user_nofault()): it succeeds
 * only where a present entry maps the page, and reads what the MMU reads, on
 * any architecture. Its failed read is a fault that the kernel does not
 * handle, which page_access_fault_start() leaves alone.
 */
static __always_inline bool user_page_mapped(__u64 addr)
{
	char byte;

	return !bpf_probe_read_user(&byte, sizeof(byte), (const void *)addr);
}

/*
 * Pages of a large folio beyond the fault-around range (see
 * page_access_map_whole_folios()): the kernel maps a folio whole or not at
 * all, so one page not known as accessed or mapped tells for the chunk's
 * others; its page-table entry is looked at, not guessed.
 */
static __always_inline int chunk_mapped_whole(struct chunk_walk *walk, __u64 mask)
{
	struct page_chunk *state = chunk_state(&walk->key, false);
	__u64 base = walk->key.chunk << CHUNK_SHIFT, candidates = mask, page;

	if (state)
		candidates &= ~(state->accessed | state->mapped);
	if (!candidates)
		return 0;
	page = base + lowest_bit(candidates);
	if (!user_page_mapped(walk->vm_start + ((page - walk->vm_pgoff) << page_shift)))
		return 1;	/* not mapped whole */
	state = state ?: chunk_state(&walk->key, true);
	if (!state)
		return 1;
	state->mapped |= candidates;
	on_map(walk->inode, &walk->key, candidates);
	return 0;
}

static long walk_one_chunk(__u32 i, struct chunk_walk *walk)
{
	__u64 chunk = (walk->first >> CHUNK_SHIFT) + i;
	__u64 mask;

	if (chunk > (walk->last >> CHUNK_SHIFT))
		return 1;
	walk->key.chunk = chunk;
	mask = range_mask(chunk, walk->first, walk->last);
	switch (walk->op) {
	case OP_READ_CALL:
		return chunk_read_call(walk, mask);
	case OP_FAULT:
		return chunk_fault(walk, mask);
	case OP_MAPPED_WHOLE:
		return chunk_mapped_whole(walk, mask);
	default:
		return chunk_map(walk, mask);
	}
}

static __always_inline void walk_chunks(struct chunk_walk *walk)
{
	__u64 chunks = (walk->last >> CHUNK_SHIFT) - (walk->first >> CHUNK_SHIFT) + 1;

	if (walk->last < walk->first || !use_bpf_loop)
		return;
	if (chunks == 1) {	/* most faults and reads: no loop to set up */
		walk_one_chunk(0, walk);
		return;
	}
	bpf_loop(MAX_CHUNKS, walk_one_chunk, walk, 0);
	if (chunks > MAX_CHUNKS)
		on_walk_cut_short();
}

static __always_inline void start_walk(struct chunk_walk *walk, struct address_space *mapping,
				       __u32 op, __u64 first, __u64 last)
{
	walk->mapping = mapping;
	walk->inode = BPF_CORE_READ(mapping, host);
	file_id_of(walk->inode, &walk->key.file);
	walk->op = op;
	walk->first = first;
	walk->last = last;
	walk->fault_index = (__u64)-1;
}

/* ------------------------------------------------------------------ */
/* Entry points                                                        */

/* filemap:mm_filemap_get_pages(mapping, index, last_index) */
static __always_inline void page_access_read_call(struct address_space *mapping,
						  __u64 index, __u64 last)
{
	struct chunk_walk walk = {};
	struct thread_access *ta;
	__s64 size = BPF_CORE_READ(mapping, host, i_size);
	__u64 end, asked = last;
	bool same_call, syscall_start;

	if (size <= 0)
		return;
	end = (__u64)(size - 1) >> page_shift;
	if (last > end)
		last = end;
	if (index > last)
		return;
	start_walk(&walk, mapping, OP_READ_CALL, index, last);
	ta = thread_access(true);
	if (!ta) {
		if (!count_hits)
			walk_chunks(&walk);	/* every batch again: slower, still right */
		return;
	}
	/*
	 * The first batch of a read system call seen at its entry: the call
	 * starts at syscall_first, even when its tracepoint says later (a batch
	 * returned by filemap_get_pages()'s error path, see
	 * page_access_read_syscall()).
	 */
	syscall_start = ta->syscall_mapping == (__u64)mapping && ta->syscall_last == asked &&
			ta->syscall_first <= index;
	ta->syscall_mapping = 0;
	/*
	 * The batches of one call share its end, and move forward. Without
	 * this, a 1 GiB read() would walk what is left of its range at each of
	 * its thousands of batches. In a call seen at its entry, a later batch
	 * may start beyond what was counted (a batch without tracepoint): the
	 * walk then covers that batch too.
	 */
	same_call = !syscall_start && ta->call_mapping == (__u64)mapping &&
		    ta->call_last == asked && index > ta->call_index &&
		    (ta->call_in_syscall || index <= ta->call_counted);
	walk.counted = syscall_start ? ta->syscall_first : same_call ? ta->call_counted : index;
	walk.first = walk.counted;
	walk_chunks(&walk);
	if (!count_hits)
		walk.counted = last + 1;	/* trace: the whole call is recorded */
	ta->call_mapping = (__u64)mapping;
	ta->call_last = asked;
	ta->call_index = index;
	ta->call_counted = walk.counted;
	ta->call_in_syscall = syscall_start || (same_call && ta->call_in_syscall);
}

/* ------------------------------------------------------------------ */
/* The read system calls: where a call starts                          */

/*
 * filemap_get_pages() (mm/filemap.c) hands filemap_read() a batch without
 * firing mm_filemap_get_pages when the batch's last folio is not uptodate
 * yet (readahead I/O in flight): the err: label drops that folio and returns
 * the others (`if (likely(--fbatch->nr)) return 0;`), which the read copies.
 * The next batch's tracepoint starts after them. No tracepoint, kprobe or
 * fentry sees that copy here, but the call's start does: raw_syscalls:
 * sys_enter gives the file and the position of read, pread64, readv, preadv
 * and preadv2, and page_access_read_call() starts the call's walk there.
 */
#if defined(__TARGET_ARCH_x86)
enum { NR_READ = 0, NR_PREAD64 = 17, NR_READV = 19, NR_PREADV = 295, NR_PREADV2 = 327 };
#elif defined(__TARGET_ARCH_arm64) || defined(__TARGET_ARCH_riscv)
/* include/uapi/asm-generic/unistd.h */
enum { NR_READ = 63, NR_READV = 65, NR_PREAD64 = 67, NR_PREADV = 69, NR_PREADV2 = 286 };
#else
enum { NR_READ = -1, NR_READV = -1, NR_PREAD64 = -1, NR_PREADV = -1, NR_PREADV2 = -1 };
#endif

/*
 * The calls that can put a file's mapping where an anonymous VMA was:
 * mmap, mremap, shmat, remap_file_pages, execve and execveat (munmap
 * alone cannot; the mmap after it can).
 */
#if defined(__TARGET_ARCH_x86)
enum { NR_MMAP = 9, NR_MREMAP = 25, NR_SHMAT = 30, NR_EXECVE = 59, NR_REMAP_FILE_PAGES = 216,
       NR_EXECVEAT = 322 };
#elif defined(__TARGET_ARCH_arm64) || defined(__TARGET_ARCH_riscv)
enum { NR_SHMAT = 196, NR_MREMAP = 216, NR_EXECVE = 221, NR_MMAP = 222, NR_REMAP_FILE_PAGES = 234,
       NR_EXECVEAT = 281 };
#else
enum { NR_MMAP = -1, NR_MREMAP = -1, NR_SHMAT = -1, NR_EXECVE = -1, NR_REMAP_FILE_PAGES = -1,
       NR_EXECVEAT = -1 };
#endif

static __always_inline bool may_map_a_file(long id)
{
	if (NR_MMAP < 0)
		return true;	/* numbers unknown: every call may */
	return id == NR_MMAP || id == NR_MREMAP || id == NR_SHMAT || id == NR_EXECVE ||
	       id == NR_REMAP_FILE_PAGES || id == NR_EXECVEAT;
}

/*
 * Calls that may map a file (may_map_a_file()) any traced thread has
 * started. A thread's remembered anonymous VMA (resolve_silent()) is
 * trusted only while this is what it was when the VMA was looked up: a
 * file mapped with MAP_FIXED over anonymous memory the thread had just
 * faulted in, and its 2 MiB folios' faults were taken for anonymous ones (7
 * of 8 PMD-mapped faults and their 3,577 pages lost, 6.18,
 * tests/test_pmd_mapped_faults.py; the likely cause of 7.3's seed 1118,
 * where a file's mmap can land where a freed buffer's anonymous VMA was).
 * Counted at the call's start: a lookup by another thread while the call
 * runs may still find the VMA it is replacing (no program sees the call's
 * end), a race only a program that faults on memory it is replacing runs.
 */
__u64 mapping_calls = 0;

static __always_inline bool is_read_syscall(long id)
{
	return id >= 0 && (id == NR_READ || id == NR_PREAD64 || id == NR_READV ||
			   id == NR_PREADV || id == NR_PREADV2);
}

/* vfs_read(): a call moves at most MAX_RW_COUNT bytes (INT_MAX & PAGE_MASK). */
#define MAX_RW_COUNT_PAGE_MASKED(shift)	(0x7fffffffULL & ~((1ULL << (shift)) - 1))
/* A readv of more vectors than this is left to the tracepoint alone. */
#define MAX_SUMMED_IOVECS	8

static __always_inline struct file *current_file_of_fd(__u64 fd)
{
	struct task_struct *task = current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds, *file = NULL;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	return file;
}

/* The bytes a readv asks for: the sum of its vectors' lengths, or 0. */
static __always_inline __u64 iovec_bytes(const struct iovec *iov, __u64 count)
{
	struct iovec vec;
	__u64 total = 0;

	if (count > MAX_SUMMED_IOVECS)
		return 0;
	for (int i = 0; i < MAX_SUMMED_IOVECS; i++) {
		if (i >= count)
			break;
		if (bpf_probe_read_user(&vec, sizeof(vec), &iov[i]))
			return 0;
		total += vec.iov_len;
	}
	return total;
}

/* raw_syscalls:sys_enter for a traced thread: remember where a read call starts. */
static __always_inline void page_access_read_syscall(struct pt_regs *regs, long id)
{
	__u64 fd = PT_REGS_PARM1_CORE_SYSCALL(regs), bytes, pos;
	__u64 arg2 = PT_REGS_PARM2_CORE_SYSCALL(regs), arg3 = PT_REGS_PARM3_CORE_SYSCALL(regs);
	struct thread_access *ta;
	struct file *file;
	__s64 given_pos = -1;

	if (id == NR_PREAD64 || id == NR_PREADV || id == NR_PREADV2)
		given_pos = (__s64)PT_REGS_PARM4_CORE_SYSCALL(regs);
	bytes = (id == NR_READ || id == NR_PREAD64) ? arg3 :
		iovec_bytes((const struct iovec *)arg2, arg3);
	if (bytes > MAX_RW_COUNT_PAGE_MASKED(page_shift))
		bytes = MAX_RW_COUNT_PAGE_MASKED(page_shift);
	ta = thread_access(true);
	if (!ta)
		return;
	ta->syscall_mapping = 0;
	file = current_file_of_fd(fd);
	if (!bytes || !file || (given_pos < 0 && id != NR_READ && id != NR_READV &&
				id != NR_PREADV2))
		return;
	/* preadv2 with offset -1 reads at the file position, as read does. */
	pos = given_pos >= 0 ? (__u64)given_pos : (__u64)BPF_CORE_READ(file, f_pos);
	ta->syscall_first = pos >> page_shift;
	ta->syscall_last = (pos + bytes - 1) >> page_shift;
	ta->syscall_mapping = (__u64)BPF_CORE_READ(file, f_mapping);
}

/* filemap:mm_filemap_fault(mapping, index): once per fault, retries too. */
static __always_inline void page_access_fault(struct address_space *mapping, __u64 index)
{
	struct chunk_walk walk = {};
	struct thread_access *ta = thread_access(true);

	if (!ta)
		return;
	if (ta->fault_state == FAULT_RESOLVED && ta->fault_mapping == (__u64)mapping &&
	    ta->fault_index == index)
		return;	/* the same fault, retried after the page was read */
	if (ta->fault_state == FAULT_DEFERRED)	/* fault-around did not serve it: this is its access */
		ta->deferred_maps[ta->deferred_slot & (DEFERRED_MAPS - 1)].account = 0;
	start_walk(&walk, mapping, OP_FAULT, index, index);
	walk_chunks(&walk);
	ta->fault_state = FAULT_RESOLVED;
	ta->fault_mapping = (__u64)mapping;
	ta->fault_index = index;
	ta->fault_expects_read = walk.absent;
	ta->fault_folio_check = 1;
}

struct vma_lookup {
	__u64 address;
	__u64 mapping;	/* 0: an anonymous VMA */
	__u64 index;
	__u64 start, end;	/* the VMA */
	__u64 pgoff;
};

static long vma_file_page(struct task_struct *task, struct vm_area_struct *vma,
			  struct vma_lookup *lookup)
{
	struct file *file = BPF_CORE_READ(vma, vm_file);

	(void)task;
	lookup->start = BPF_CORE_READ(vma, vm_start);
	lookup->end = BPF_CORE_READ(vma, vm_end);
	lookup->pgoff = BPF_CORE_READ(vma, vm_pgoff);
	if (!file)
		return 0;
	lookup->mapping = (__u64)BPF_CORE_READ(file, f_mapping);
	lookup->index = ((lookup->address - lookup->start) >> page_shift) + lookup->pgoff;
	return 0;
}

/*
 * "mm/filemap: map entire large folio faultaround" (Kiryl Shutsemau, 2025,
 * v6.18) maps a large folio whole when it lies inside the VMA and one page
 * table (and, since "mm/memory: do not populate page table entries beyond
 * i_size", inside the file): beyond the [start, end] that
 * mm_filemap_map_pages gives, up to the folio's ends. Only the folios at
 * the range's two ends can reach beyond it (@at_start: the one at @start,
 * else the one at @end). Whether this kernel did is read from the page
 * tables (chunk_mapped_whole()), never assumed.
 */
static __always_inline void map_folio_beyond(struct chunk_walk *walk, struct vma_lookup *vma,
					     bool at_start, __u64 start, __u64 end)
{
	unsigned long folio = folio_at(walk->mapping, at_start ? start : end);
	__u64 first = 0, last, nr;

	if (!folio || (nr = folio_pages((const struct folio *)folio)) < 2)
		return;
	bpf_probe_read_kernel(&first, sizeof(first), (void *)folio + page_index_offset());
	last = first + nr - 1;
	if (first < vma->pgoff || last - vma->pgoff >= (vma->end - vma->start) >> page_shift)
		return;	/* not inside the VMA: never mapped whole */
	walk->first = at_start ? first : end + 1;
	walk->last = at_start ? start - 1 : last;
	walk->vm_start = vma->start;
	walk->vm_pgoff = vma->pgoff;
	walk_chunks(walk);
}

/*
 * Can the folio at @page reach beyond the range it ends (@at_start: begins
 * before @page; else goes on after it)? The cheap test, before any VMA
 * lookup: a folio below 64 pages lies in one leaf, where its pages past
 * the first are sibling slots; a folio of 64 pages or more, above the
 * leaves, may always.
 */
static __always_inline bool folio_may_reach_past(struct address_space *mapping, __u64 page,
						 bool at_start)
{
	unsigned long entry;
	bool only_page_0;
	struct xa_node *leaf = chunk_leaf(mapping, page >> CHUNK_SHIFT, &entry, &only_page_0);
	__u64 slot = page & (CHUNK_PAGES - 1);

	if (!leaf)
		return !only_page_0 && xa_entry_is_folio(entry);
	if (!at_start && slot == CHUNK_PAGES - 1)
		return false;
	bpf_core_read(&entry, sizeof(entry), &leaf->slots[at_start ? slot : slot + 1]);
	return xa_entry_is_sibling(entry);
}

/*
 * After fault-around's own range: @walk is that range's walk, reused (the
 * 512-byte stack of kernels before v6.13 has no room for a second one).
 */
static __always_inline void page_access_map_whole_folios(struct chunk_walk *walk,
							 __u64 start, __u64 end,
							 struct vma_lookup *vma)
{
	bool before = start > 0 && folio_may_reach_past(walk->mapping, start, true);
	bool after = folio_may_reach_past(walk->mapping, end, false);

	if (!before && !after)
		return;	/* most fault-arounds: no VMA lookup, no page-table read */
	if (!vma->mapping &&
	    bpf_find_vma(current_task(), vma->address, vma_file_page, vma, 0) == -16 /* -EBUSY */)
		on_fault_lost();
	if (vma->mapping != (__u64)walk->mapping)
		return;	/* not this thread's fault (a remote GUP): no page tables to read */
	walk->op = OP_MAPPED_WHOLE;
	if (before)
		map_folio_beyond(walk, vma, true, start, end);
	if (after)
		map_folio_beyond(walk, vma, false, start, end);
}

/*
 * The VMA of the fault at @lookup->address, from @vmf where the program has
 * it (fexit/filemap_map_pages, 6.1): bpf_find_vma() takes the mmap lock
 * with a trylock, which fails while a writer holds it or waits behind the
 * fault's own read hold (6.1's faults hold the mmap lock: per-VMA locks
 * came in v6.4; khugepaged's collapse is such a writer), and the fault's
 * page is then recorded as mapped, not accessed: the likely cause of
 * tests/cachefuzz.py seed 1185's one mismatch on 6.1.
 */
static __always_inline bool vma_from_fault(struct vm_fault *vmf, struct vma_lookup *lookup)
{
	if (!vmf || BPF_CORE_READ(vmf, address) >> page_shift != lookup->address >> page_shift)
		return false;
	vma_file_page(NULL, BPF_CORE_READ(vmf, vma), lookup);
	return true;
}

/*
 * The VMA of the thread's fault at @lookup->address, at fault-around.
 * bpf_find_vma() takes the mmap lock with a trylock, which fails while
 * another thread of the process holds it for writing or waits for it
 * (mmap, munmap, mprotect): a C program whose second thread maps and
 * unmaps in a loop had 77 to 311 of 512 touched pages recorded as mapped
 * only (6.18). The thread's last file VMA found is kept, and a failed
 * lookup uses it when the address lies in it; the caller's check that the
 * page lies in fault-around's range catches a VMA replaced since.
 */
/* @lookup, a VMA just found, as the thread's last file VMA. */
static __always_inline void remember_vma(struct thread_access *ta, const struct vma_lookup *lookup)
{
	ta->vma_mapping = lookup->mapping;
	ta->vma_start = lookup->start;
	ta->vma_end = lookup->end;
	ta->vma_pgoff = lookup->pgoff;
}

static __always_inline void fault_vma(struct thread_access *ta, struct vma_lookup *lookup)
{
	/* Few branches: raw_tp's map_pages program is near the verifier's limit. */
	if (!bpf_find_vma(current_task(), lookup->address, vma_file_page, lookup, 0)) {
		remember_vma(ta, lookup);
	} else if (lookup->address - ta->vma_start < ta->vma_end - ta->vma_start) {
		lookup->mapping = ta->vma_mapping;
		lookup->start = ta->vma_start;
		lookup->end = ta->vma_end;
		lookup->pgoff = ta->vma_pgoff;
		lookup->index = ((lookup->address - lookup->start) >> page_shift) + lookup->pgoff;
	}
}

/*
 * Fault-around whose fault's VMA was not found: the mmap lock busy, and
 * not the thread's last file VMA (its first fault in a mapping, a forked
 * child's or a fresh mmap's). Which page faulted is then unknown, and so
 * is which of the range's pages are an access: nothing is walked now.
 * find_deferred_slot() and map_deferred_chunk() walk the range at the
 * thread's next fault or system call, reading from the page tables which
 * pages fault-around mapped (samples/mmap-contend --remap: 18 and 50 of
 * 512 touches recorded as mapped only, 15 to 129 pages as both, "0 lost",
 * before). Eight are kept; a ninth while they wait is walked at once, its
 * fault counted lost.
 */
static __always_inline bool defer_map(struct thread_access *ta, struct address_space *mapping,
				      __u64 start, __u64 end)
{
	struct deferred_map *slot;
	int free = -1;

	for (int i = 0; i < DEFERRED_MAPS; i++)
		if (!ta->deferred_maps[i].address)
			free = i;
	if (free < 0) {
		on_fault_lost();
		return false;
	}
	slot = &ta->deferred_maps[free & (DEFERRED_MAPS - 1)];
	slot->address = ta->fault_address;
	slot->mapping = (__u64)mapping;
	slot->start = start;
	slot->end = end;
	slot->account = 1;
	ta->nr_deferred_maps++;
	ta->fault_state = FAULT_DEFERRED;
	ta->deferred_slot = free;
	return true;
}

/* filemap:mm_filemap_map_pages(mapping, start, end): fault-around. */
static __always_inline void page_access_map(struct address_space *mapping, __u64 start, __u64 end,
					    struct vm_fault *vmf)
{
	struct thread_access *ta = thread_access(false);
	struct vma_lookup lookup = {};
	struct chunk_walk walk = {};

	start_walk(&walk, mapping, OP_MAP, start, end);
	if (ta && ta->fault_state == FAULT_STARTED && ta->fault_address) {
		lookup.address = ta->fault_address;
		if (!vma_from_fault(vmf, &lookup))
			fault_vma(ta, &lookup);
		if (!lookup.end && defer_map(ta, mapping, start, end))
			return;
		if (lookup.mapping == (__u64)mapping && lookup.index >= start && lookup.index <= end) {
			/*
			 * A fault taken by the arch handler (page_fault_user or
			 * _kernel) runs with FAULT_FLAG_ALLOW_RETRY: if its page is
			 * not in the cache, filemap_fault() drops the mmap lock for
			 * the read and returns VM_FAULT_RETRY, and the retry's
			 * fault-around maps all this one would, and what the read
			 * brought in. So a major fault's first fault-around is
			 * left to its retry: no page-state lookup, no cache walk.
			 */
			if (!page_in_cache(mapping, lookup.index))
				return;
			walk.fault_index = lookup.index;
			walk.account_fault = true;
		}
	} else if (ta && ta->fault_state == FAULT_RESOLVED && ta->fault_mapping == (__u64)mapping) {
		walk.fault_index = ta->fault_index;	/* a retry: not mapped "without a fault" */
		lookup.address = ta->fault_address;	/* its VMA, only if a folio needs it */
	}
	walk_chunks(&walk);
	if (ta && walk.served) {
		ta->fault_state = FAULT_RESOLVED;
		ta->fault_mapping = (__u64)mapping;
		ta->fault_index = walk.fault_index;
		ta->fault_expects_read = 0;
	}
	if (lookup.address)
		page_access_map_whole_folios(&walk, start, end, &lookup);
}

/* exceptions:page_fault_user/kernel: a new fault starts. */
/*
 * A fault that fault-around serves by mapping a whole PMD-sized folio
 * (filemap_map_pages() -> filemap_map_pmd(), with large folios in the page
 * cache: seen on 7.3) returns before filemap:mm_filemap_map_pages fires, and
 * never reaches filemap_fault(): it leaves no event. Such a fault is still
 * FAULT_STARTED at the thread's next system call (sys_enter; exit and
 * exit_group too, while its memory is still mapped) or next fault: then
 * its page, if it is a file's and in the page cache, is the access that
 * fault-around served. Anonymous faults, most faults, stay FAULT_STARTED
 * too: the last anonymous VMA found is remembered, so that the next faults
 * in it cost no VMA lookup.
 */

/*
 * Bit 0 of a deferred silent address: its fault was filemap_fault()'s,
 * counted as an access already; only its folio's other pages are left
 * (map_fault_folio()). Addresses are kept page-aligned, so the bit is free.
 */
#define SILENT_SERVED	1ULL

/*
 * A silent fault's lookup for the thread's next system call; false: none
 * free. A served one (a file's fault) takes the slot of one that is not,
 * when none is free: most of those are anonymous faults (with cachestat
 * beside cachetop every lookup at a fault's start is busy), and one
 * more than DEFERRED_SILENT is not counted either way.
 */
static __always_inline bool defer_silent(struct thread_access *ta, __u64 address)
{
	/*
	 * Loops, not unrolled: unrolled, the callers' frames grew by 128 to
	 * 224 bytes, toward 6.1's 512 for the call chain. The index is the
	 * loop's own: a computed one, clang drops its mask and 6.1's
	 * verifier refuses it.
	 */
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < DEFERRED_SILENT; i++)
		if (!ta->deferred_addresses[i]) {
			ta->deferred_addresses[i] = address;
			return true;
		}
	if (!(address & SILENT_SERVED))
		return false;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < DEFERRED_SILENT; i++)
		if (!(ta->deferred_addresses[i] & SILENT_SERVED)) {
			ta->deferred_addresses[i] = address;
			return true;
		}
	return false;
}

/*
 * map_fault_folio()'s lookup busy (the mmap lock, or bpf_find_vma's
 * irq_work with cachestat beside cachetop): left to the next system call,
 * as a silent fault is (7.3, tests/cachefuzz.py seed 1140: a touch read a
 * 2 MiB folio, mapped whole, 503 mapped pages uncounted), or counted lost
 * if all are such folios. Only if the folio's page beside the
 * fault's is mapped: the kernel maps a folio whole or only the fault's
 * page, and fault-around skipped this folio whole, so nothing else maps
 * that page (most filemap_fault()-served faults map one page: 4 "lost" in
 * make test's random scripts when each was kept).
 */
static __noinline void defer_fault_folio(struct thread_access *ta, unsigned long folio,
					      __u64 nr, __u64 index)
{
	__u64 page = ta->fault_address & -(1ULL << page_shift), first = 0, beside;

	bpf_probe_read_kernel(&first, sizeof(first), (void *)folio + page_index_offset());
	beside = index + 1 < first + nr ? page + (1ULL << page_shift) : page - (1ULL << page_shift);
	if (!user_page_mapped(beside))
		return;	/* the fault mapped its own page only */
	if (!defer_silent(ta, page | SILENT_SERVED))
		on_fault_lost();
}

/*
 * A fault that filemap_fault() served: finish_fault() maps a PMD-sized
 * folio whole with do_set_pmd() after it (a folio fault-around skipped,
 * e.g. one marked for readahead), and no event says so. Once the fault
 * has ended, the folio's other pages are read from the page tables, as
 * fault-around's are (tests/test_pmd_mapped_faults.py: the last 2 MiB of
 * a file mapped with MADV_HUGEPAGE, 511 pages uncounted before). A global
 * function: inlined, its walk's frame took the sys_enter program's call
 * chain to 544 bytes, over the 512 of kernels before v6.13 (6.1 refused it).
 */
__noinline int map_fault_folio(void)
{
	struct thread_access *ta = thread_access(false);
	struct address_space *mapping;
	struct vma_lookup lookup = {};
	struct chunk_walk walk = {};
	unsigned long folio;
	__u64 index, nr;

	if (!ta)
		return 0;
	mapping = (struct address_space *)ta->fault_mapping;
	lookup.address = ta->fault_address;
	index = ta->fault_index;
	ta->fault_folio_check = 0;
	folio = folio_at(mapping, index);
	if (!lookup.address || !folio || (nr = folio_pages((const struct folio *)folio)) < 2)
		return 0;
	fault_vma(ta, &lookup);
	if (!lookup.end) {
		defer_fault_folio(ta, folio, nr, index);
		return 0;
	}
	if (lookup.mapping != (__u64)mapping || lookup.index != index)
		return 0;	/* not this fault's page (a kernel-mode or remote fault) */
	start_walk(&walk, mapping, OP_MAP, index, index);
	page_access_map_whole_folios(&walk, index, index, &lookup);
	return 0;
}

/*
 * A deferred fault-around's pages, read from the page tables: which pages
 * fault-around mapped is what they map now, and the page cache need not
 * be walked (a mapped page is in it). Two chunks at most: fault-around's
 * default range is 16 pages (fault_around_bytes, 64 KiB).
 */
/*
 * Of the @pages (64 at most) pages that the VMA maps from @address, those
 * its page tables map: bit i for page i (@byte: where to read one byte). A loop without branches, not a
 * bpf_loop: a callback's frame took the fault program's stack to 544
 * bytes on 6.1 (512 at most before v6.13), and a branch a page made
 * states the verifier could not prune.
 */
static __always_inline __u64 ptes_mapped(__u64 pages, __u64 address, __u64 *byte)
{
	__u64 mapped = 0;

	for (__u32 i = 0; i < CHUNK_PAGES && i < pages; i++) {
		long err = bpf_probe_read_user(byte, 1,
					       (const void *)(address + ((__u64)i << page_shift)));

		mapped |= (((__u64)err >> 63) ^ 1) << i;	/* err is 0 or negative */
	}
	return mapped;
}

/*
 * One chunk of it, @mapped its pages the page tables map: the fault's page
 * is its access when @account (as chunk_map() counts it), the others are
 * mapped ones unless known already.
 */
static __always_inline void map_chunk_from_ptes(struct inode *inode, struct page_chunk_key *key,
						__u64 mapped, __u64 fault_index, bool account)
{
	__u64 base = key->chunk << CHUNK_SHIFT, fault_bit = 0, new_map;
	struct page_chunk *state;
	__u32 hits = 0, misses = 0;
	__u64 first;

	if (fault_index >= base && fault_index < base + CHUNK_PAGES)
		fault_bit = 1ULL << (fault_index - base);
	state = chunk_state(key, mapped != 0);
	if (!state)
		return;
	if (account && (mapped & fault_bit)) {
		first = mark_accessed(state, fault_bit, &hits, &misses);
		on_access(inode, key, first, hits, misses, ACCESS_BY_FAULT);
	}
	new_map = mapped & ~fault_bit & ~state->accessed & ~state->mapped;
	state->mapped |= new_map;
	if (new_map)
		on_map(inode, key, new_map);
}

/*
 * Chunk @key of the folio [first, last] around fault_index: mapped whole
 * with the fault's page if the page tables map a page of it that no
 * access or map accounts for yet (the kernel maps a folio whole or not at
 * all; as chunk_mapped_whole() reads it).
 */
static __always_inline void map_folio_chunk_from_ptes(struct inode *inode,
						      struct page_chunk_key *key, __u64 first,
						      __u64 last, __u64 fault_index,
						      struct vma_lookup *vma)
{
	__u64 base = key->chunk << CHUNK_SHIFT, candidates = range_mask(key->chunk, first, last);
	struct page_chunk *state = chunk_state(key, false);
	__u64 page;

	if (fault_index >= base && fault_index < base + CHUNK_PAGES)
		candidates &= ~(1ULL << (fault_index - base));
	if (state)
		candidates &= ~(state->accessed | state->mapped);
	if (!candidates)
		return;
	page = base + lowest_bit(candidates);
	if (user_page_mapped(vma->start + ((page - vma->pgoff) << page_shift)))
		map_chunk_from_ptes(inode, key, candidates, fault_index, false);
}

/* A PMD-sized folio, the largest the page cache holds: 8 chunks. */
#define FOLIO_CHUNKS	8

/*
 * The silent fault at @address, once it has ended: its page, if a file's
 * and one fault-around maps, is its access, and the rest of its folio,
 * which a PMD mapped with it, is read from the page tables. A global
 * function: verified once, and with its own frame, not the walk of the
 * page cache's (with that walk, eight of these at sys_enter took the
 * program's stack past the 512 bytes of kernels before v6.13).
 */
__noinline int resolve_silent(__u64 address)
{
	__u64 served = address & SILENT_SERVED;
	struct thread_access *ta = thread_access(false);
	struct vma_lookup lookup = {};
	struct address_space *mapping;
	struct page_chunk_key *key;
	struct chunk_cache cache;
	__u64 first, last, nr, bit;
	struct inode *inode;
	unsigned long folio;
	long err;

	if (!ta || (address >= ta->anon_start && address < ta->anon_end &&
		    ta->anon_mapping_calls == mapping_calls))
		return 0;
	/*
	 * At a page_fault_* tracepoint interrupts are off, and there
	 * bpf_find_vma() unlocks the mmap lock through a per-CPU irq_work
	 * ("bpf: Introduce helper bpf_find_vma", Song Liu, v5.17): a second
	 * call before that work ran (another tool's program on the same
	 * tracepoint: cachestat beside cachetop) gets -EBUSY. The fault is
	 * then resolved at the thread's next system call, where interrupts
	 * are on (7.3, tests/cachefuzz.py seed 1118: three PMD-mapped faults
	 * and their 1,449 pages lost). DEFERRED_SILENT are kept (one was: 8
	 * PMD-mapped faults with no system call between them gave 2 hits and
	 * 1,022 mapped pages of 8 and 4,088, tests/test_pmd_mapped_faults.py).
	 * One more is not counted lost: most such faults are anonymous, and with
	 * cachestat beside cachetop every lookup at a fault finds the
	 * irq_work busy (18,340 "lost" in 100 scripts, counted).
	 */
	address &= -(1ULL << page_shift);
	lookup.address = address;
	ta->lookup_mapping_calls = mapping_calls;	/* before: one may start during the lookup */
	err = bpf_find_vma(current_task(), address, vma_file_page, &lookup, 0);
	if (err == -16 /* -EBUSY */ && !defer_silent(ta, address | served) && served)
		on_fault_lost();
	if (err)
		return 0;
	if (!lookup.mapping) {
		ta->anon_start = lookup.start;
		ta->anon_end = lookup.end;
		ta->anon_mapping_calls = ta->lookup_mapping_calls;
		return 0;
	}
	mapping = (struct address_space *)lookup.mapping;
	bit = 1ULL << (lookup.index & (CHUNK_PAGES - 1));
	if (!served) {
		chunk_in_cache(mapping, lookup.index >> CHUNK_SHIFT, bit, bit, &cache);
		if (!(cache.mappable & bit))
			return 0;
	}
	inode = BPF_CORE_READ(mapping, host);
	key = &ta->silent_key;
	file_id_of(inode, &key->file);
	key->chunk = lookup.index >> CHUNK_SHIFT;
	if (!served)
		map_chunk_from_ptes(inode, key, bit, lookup.index, true);
	/* The folio's other pages, which the PMD mapped with it (7.3: 391 of a 2 MiB folio). */
	folio = folio_at(mapping, lookup.index);
	if (!folio || (nr = folio_pages((const struct folio *)folio)) < 2)
		return 0;
	bpf_probe_read_kernel(&first, sizeof(first), (void *)folio + page_index_offset());
	last = first + nr - 1;
	if (first < lookup.pgoff || last - lookup.pgoff >= (lookup.end - lookup.start) >> page_shift)
		return 0;	/* not inside the VMA: never mapped whole */
#pragma clang loop unroll(disable)
	for (__u64 c = 0; c < FOLIO_CHUNKS; c++) {
		key->chunk = (first >> CHUNK_SHIFT) + c;
		if (key->chunk > last >> CHUNK_SHIFT)
			break;
		map_folio_chunk_from_ptes(inode, key, first, last, lookup.index, &lookup);
	}
	return 0;
}

/*
 * A fault-around defer_map() kept, once its VMA is found (then kept as the
 * thread's last file VMA): its fault's page, and which of its pages the
 * page tables map, kept in its slot for map_deferred_chunk(). Still busy:
 * kept for the next fault or system call. Unmapped or replaced since, or
 * longer than 64 pages: lost. Global functions (verified once, not again
 * with each caller's states: inlined, with a walk of the page cache, this
 * took the fault and sys_enter programs from 80,000 to 550,000
 * instructions verified on 6.18), and small ones: in one, the chain from
 * the fault program through it to emit_page_run() needed 544 bytes of
 * stack, over the 512 of kernels before v6.13 (6.1 refused it).
 */
__noinline int find_deferred_slot(__u32 i)
{
	struct thread_access *ta = thread_access(false);
	struct vma_lookup lookup = {};
	struct deferred_map *slot;
	long err;

	if (!ta)
		return 0;
	slot = &ta->deferred_maps[i & (DEFERRED_MAPS - 1)];
	lookup.address = slot->address;
	if (!lookup.address || slot->found)
		return 0;
	err = bpf_find_vma(current_task(), lookup.address, vma_file_page, &lookup, 0);
	if (err == -16 /* -EBUSY */)
		return 0;
	if (err || lookup.mapping != slot->mapping || lookup.index < slot->start ||
	    lookup.index > slot->end || slot->end - slot->start >= CHUNK_PAGES) {
		slot->address = 0;
		ta->nr_deferred_maps--;
		on_fault_lost();
		return 0;
	}
	remember_vma(ta, &lookup);
	slot->index = lookup.index;
	slot->mapped = ptes_mapped(slot->end - slot->start + 1,
				   lookup.start + ((slot->start - lookup.pgoff) << page_shift),
				   &slot->byte_read);
	slot->found = 1;
	return 0;
}

/*
 * A found one's pages in chunk @second (0: the chunk of its first page, 1:
 * the next), into the page states. One chunk a call: with both, the cache
 * tools' chain through it to emit_file_path() was 544 bytes on 6.1.
 */
__noinline int map_deferred_chunk(__u32 i, __u32 second)
{
	struct thread_access *ta = thread_access(false);
	struct address_space *mapping;
	struct deferred_map *slot;
	struct inode *inode;
	__u64 shift, mapped;

	if (!ta)
		return 0;
	slot = &ta->deferred_maps[i & (DEFERRED_MAPS - 1)];
	if (!slot->address || !slot->found)
		return 0;
	/* The range's bits, from its first page on, into the chunk's own. */
	shift = slot->start & (CHUNK_PAGES - 1);
	if (!second)
		mapped = slot->mapped << shift;
	else
		mapped = shift ? slot->mapped >> (CHUNK_PAGES - shift) : 0;
	if (!mapped)
		return 0;
	mapping = (struct address_space *)slot->mapping;
	inode = BPF_CORE_READ(mapping, host);
	file_id_of(inode, &slot->key.file);
	slot->key.chunk = (slot->start >> CHUNK_SHIFT) + (second & 1);
	map_chunk_from_ptes(inode, &slot->key, mapped, slot->index, slot->account);
	return 0;
}

/* Deferred fault-around @i, if its VMA is found now; its slot is then freed. */
static __always_inline void resolve_deferred_map(struct thread_access *ta, __u32 i)
{
	struct deferred_map *slot = &ta->deferred_maps[i & (DEFERRED_MAPS - 1)];

	find_deferred_slot(i);
	if (!slot->address || !slot->found)
		return;
	map_deferred_chunk(i, 0);
	map_deferred_chunk(i, 1);
	if (ta->fault_state == FAULT_DEFERRED && ta->fault_address == slot->address)
		ta->fault_state = FAULT_NONE;	/* nothing left of it to resolve */
	slot->address = 0;
	slot->found = 0;
	ta->nr_deferred_maps--;
}

/* In slot order: each is one fault's, and the page tables, not the order, tell what it mapped. */
static __always_inline void resolve_deferred_maps(struct thread_access *ta)
{
	for (int i = 0; i < DEFERRED_MAPS; i++)
		if (ta->deferred_maps[i].address)
			resolve_deferred_map(ta, i);
}

static __always_inline void resolve_silent_fault(struct thread_access *ta)
{
	if (ta->nr_deferred_maps)
		resolve_deferred_maps(ta);
	if (ta->fault_folio_check && ta->fault_state == FAULT_RESOLVED)
		map_fault_folio();
	if (ta->fault_state != FAULT_STARTED || !ta->fault_address)
		return;
	ta->fault_state = FAULT_NONE;
	resolve_silent(ta->fault_address);
}

/*
 * sys_enter of a traced thread: its last fault has ended, so a silent one
 * is resolved here, with interrupts on; first the faults deferred as busy.
 * Then a call that may map a file is counted: the faults before it were
 * resolved against the VMAs before it.
 */
static __always_inline void page_access_syscall_starts(long id)
{
	struct thread_access *ta = thread_access(false);

	for (int i = 0; ta && i < DEFERRED_SILENT; i++) {
		__u64 deferred = ta->deferred_addresses[i];

		if (deferred) {
			ta->deferred_addresses[i] = 0;
			resolve_silent(deferred);
		}
	}
	if (ta)
		resolve_silent_fault(ta);
	if (may_map_a_file(id))
		__sync_fetch_and_add(&mapping_calls, 1);
}

/*
 * task->pagefault_disabled as a fault's tracepoint sees it when the kernel
 * will handle the fault: a user-mode fault always is one. Kernels count
 * their own pagefault_disable() around tracepoints in it or not (this
 * VM's 6.18: 1), so it is learnt from user-mode faults, not assumed; -1
 * until the first.
 */
int handled_fault_depth = -1;

/*
 * A kernel-mode fault taken with page faults disabled beyond that depth
 * (do_user_addr_fault() gives up on it: faulthandler_disabled()) maps
 * nothing and is no access of the thread's: bpf_probe_read_user() of
 * user_page_mapped(), of another tool beside this one (cachestat beside
 * cachetop, each with a map_pages program of its own), or the kernel's own
 * nofault reads. Taken for the thread's fault, it replaced the fault in
 * progress (tests/cachefuzz.py, seeds 6, 602, 703 and 731, cachestat
 * beside cachetop).
 */
static __always_inline bool fault_will_be_handled(bool user_mode)
{
	__s32 depth = BPF_CORE_READ(current_task(), pagefault_disabled);

	if (user_mode) {
		if (depth != handled_fault_depth)
			handled_fault_depth = depth;
		return true;
	}
	return handled_fault_depth < 0 || depth <= handled_fault_depth;
}

static __always_inline void page_access_fault_start(__u64 address, bool user_mode)
{
	struct thread_access *ta;

	if (!fault_will_be_handled(user_mode))
		return;
	ta = thread_access(true);
	if (!ta)
		return;
	resolve_silent_fault(ta);
	ta->fault_address = address;
	ta->fault_state = FAULT_STARTED;
	ta->fault_expects_read = 0;
	ta->fault_folio_check = 0;
}

/*
 * Pages read from storage (count_hits only): pending until accessed. A walk
 * of its own, lighter than struct chunk_walk: it runs inside the bio walk's
 * bpf_loop callback, and kernels before v6.13 allow 512 bytes of stack for
 * the whole call chain (core_fixes.bpf.h, read_scratch).
 */
struct pending_walk {
	struct page_chunk_key key;
	__u64 first, last;	/* pages, inclusive */
	__u64 skip_index;	/* a fault's page, counted as its miss already; or -1 */
};

static long mark_pending_chunk(__u32 i, struct pending_walk *walk)
{
	__u64 chunk = (walk->first >> CHUNK_SHIFT) + i;
	__u64 base = chunk << CHUNK_SHIFT, mask;
	struct page_chunk *state;

	if (chunk > (walk->last >> CHUNK_SHIFT))
		return 1;
	walk->key.chunk = chunk;
	mask = range_mask(chunk, walk->first, walk->last);
	if (walk->skip_index >= base && walk->skip_index < base + CHUNK_PAGES)
		mask &= ~(1ULL << (walk->skip_index - base));
	state = chunk_state(&walk->key, mask != 0);
	if (state)
		state->pending |= mask;
	return 0;
}

static __always_inline void page_access_read_from_storage(struct inode *inode, __u64 first,
							  __u64 nr_pages)
{
	struct address_space *fault_mapping;
	struct pending_walk walk = {};
	struct thread_access *ta;
	__u64 chunks;

	if (!count_hits || !inode || !nr_pages || !use_bpf_loop)
		return;
	file_id_of(inode, &walk.key.file);
	walk.first = first;
	walk.last = first + nr_pages - 1;
	walk.skip_index = (__u64)-1;
	ta = thread_access(false);
	if (ta && ta->fault_expects_read && ta->fault_mapping &&
	    (fault_mapping = (struct address_space *)ta->fault_mapping) &&
	    BPF_CORE_READ(fault_mapping, host) == inode &&
	    ta->fault_index >= walk.first && ta->fault_index <= walk.last) {
		walk.skip_index = ta->fault_index;
		ta->fault_expects_read = 0;
	}
	chunks = (walk.last >> CHUNK_SHIFT) - (walk.first >> CHUNK_SHIFT) + 1;
	if (chunks == 1) {
		mark_pending_chunk(0, &walk);
		return;
	}
	bpf_loop(MAX_CHUNKS, mark_pending_chunk, &walk, 0);
	if (chunks > MAX_CHUNKS)
		on_walk_cut_short();
}

/*
 * sched_process_exit, in the exiting thread: a fault-around still waiting
 * for its VMA is lost (a thread killed before its next system call, or
 * busy at its last). Task storage goes with its task, a hash entry does
 * not.
 */
static __always_inline void page_access_exit(__u32 tid)
{
	struct thread_access *ta = thread_access(false);

	for (int i = 0; ta && i < DEFERRED_MAPS; i++)
		if (ta->deferred_maps[i].address)
			on_fault_lost();
	for (int i = 0; ta && i < DEFERRED_SILENT; i++)
		if (ta->deferred_addresses[i] & SILENT_SERVED)
			on_fault_lost();
	thread_storage_forget(&thread_accesses, tid);
}

#endif /* PAGETRACE_PAGE_ACCESS_BPF_H */
