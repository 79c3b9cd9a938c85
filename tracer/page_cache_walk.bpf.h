/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A module of the page-access engine (page_access.bpf.h), on its state:
 * the page cache read as filemap_map_pages() reads it (xarray leaves, folios
 * present, uptodate, unlocked, no readahead mark), and the walk over the 64-page
 * chunks of page_states that every entry point shares (struct chunk_walk).
 *
 * Invariants: a chunk walk covers [first, last] of one mapping, one chunk of 64
 * pages at a time, at most MAX_CHUNKS (longer is on_walk_cut_short()); a page
 * is an access at most once per walk; a page's state changes only here.
 */
#ifndef PAGETRACE_PAGE_CACHE_WALK_BPF_H
#define PAGETRACE_PAGE_CACHE_WALK_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "page_access.h"
#include "core_fixes.bpf.h"
#include "page_math.bpf.h"
#include "page_state.bpf.h"
#include "scratch.bpf.h"
#include "sinks.bpf.h"

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

/* xa_chunk_entry()'s mark on a folio that covers page 0 only (folios are 64-byte aligned). */
#define XA_ONLY_PAGE_0	4UL

/*
 * Down an xarray, from its head @head, to chunk @chunk. XA_CHUNK_SIZE is 64, so a leaf
 * node covers exactly one chunk. Returns the entry that covers the chunk:
 * the leaf node's (an xarray node entry), a folio of 64 pages or more from
 * above, the one small folio that a tree without nodes holds at index 0
 * (marked XA_ONLY_PAGE_0), or 0.
 *
 * A global function: the verifier checks it once per program, whatever
 * its callers, instead of its eight levels at each inlined call (most of
 * the instructions of the map_pages programs; docs/fault-path.md, "The
 * verifier's budget").
 * Its arguments are scalars, as kernels before v5.12 require (a tp_btf
 * program's typed pointer is not one: the caller reads the head).
 */
__noinline __u64 xa_chunk_entry(__u64 head, __u64 chunk)
{
	__u64 index = chunk << CHUNK_SHIFT;
	unsigned long entry = head;

	if (!xa_entry_is_node(entry))
		return chunk == 0 && xa_entry_is_folio(entry) ? entry | XA_ONLY_PAGE_0 : 0;
	for (int level = 0; level < 8; level++) {
		struct xa_node *node = (struct xa_node *)(entry - 2);
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
			return 0;	/* beyond the tree */
		if (shift == 0)
			return entry;
		offset = (index >> shift) & 63;
		bpf_core_read(&entry, sizeof(entry), &node->slots[offset]);
		if (xa_entry_is_sibling(entry))
			bpf_core_read(&entry, sizeof(entry), &node->slots[(entry >> 2) & 63]);
		if (!xa_entry_is_node(entry))
			return xa_entry_is_folio(entry) ? entry : 0;
	}
	return 0;
}

/*
 * Chunk @chunk's leaf node, or NULL with *entry the folio that covers the
 * chunk from above (or 0), or with *only_page_0 set, the one small folio of
 * a tree without nodes (see xa_chunk_entry()).
 */
static __always_inline struct xa_node *chunk_leaf(struct address_space *mapping, __u64 chunk,
						  unsigned long *entry, bool *only_page_0)
{
	__u64 e = xa_chunk_entry((__u64)BPF_CORE_READ(mapping, i_pages.xa_head), chunk);

	*only_page_0 = e & XA_ONLY_PAGE_0;
	*entry = e & ~XA_ONLY_PAGE_0;
	return xa_entry_is_node(*entry) ? (struct xa_node *)(*entry - 2) : NULL;
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
	__u32 room;		/* ROOM_*: where it lives (walk_room) */
	__u32 how;
	bool account_fault;	/* OP_MAP: the faulting page is this fault's access */
	bool served;		/* OP_MAP: fault-around mapped the faulting page */
	bool absent;		/* OP_FAULT: the page is not in the cache yet */
	__u64 vm_start, vm_pgoff; /* OP_MAPPED_WHOLE: the faulting VMA */
};

/* A new chunk's state: read-only data, not a frame's bytes. */
static const struct page_chunk no_page_chunk;

static __always_inline struct page_chunk *chunk_state(struct page_chunk_key *key, bool create)
{
	struct page_chunk *state = bpf_map_lookup_elem(&page_states, key);
	long err;

	if (state || !create)
		return state;
	err = bpf_map_update_elem(&page_states, key, &no_page_chunk, BPF_NOEXIST);
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
		on_access(walk->inode, &walk->key,
			  &(struct chunk_access){ first, hits, misses, ACCESS_BY_READ });
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
	on_access(walk->inode, &walk->key,
		  &(struct chunk_access){ first, hits, misses, ACCESS_BY_FAULT });
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
		on_access(walk->inode, &walk->key,
			  &(struct chunk_access){ first, hits, misses, ACCESS_BY_FAULT });
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

static __always_inline long walk_one_chunk(__u32 i, struct chunk_walk *walk)
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

/*
 * Every chunk walk lives in a per-CPU room of its kind (scratch.bpf.h's
 * invariant: held from its program's take to its give, on one CPU), so
 * that walk_chunk() finds it by its room: a pointer passed to a global
 * function is plain memory to the verifier, and 6.1's takes no map key
 * from it ("R2 type=mem expected=fp, ..., map_value").
 */
enum { ROOM_READ_CALL, ROOM_FAULT, ROOM_MAP, ROOM_FOLIO, WALK_ROOMS };

SCRATCH_ROOMS(walk_room, struct chunk_walk, WALK_ROOMS)

static const __u32 walk_room_keys[WALK_ROOMS] = { ROOM_READ_CALL, ROOM_FAULT, ROOM_MAP, ROOM_FOLIO };

/* The walk of @room, zeroed, or NULL when busy (nested on this CPU: the caller counts it lost). */
static __always_inline struct chunk_walk *walk_room_take(__u32 room)
{
	struct chunk_walk *walk = walk_room_take_room(room);

	if (walk)
		walk->room = room;
	return walk;
}

/*
 * Chunk @i of the walk in @room: a global function, verified once per
 * program with the walk unknown (every op), not again at each caller's
 * walk with its states (docs/fault-path.md, "The verifier's budget").
 */
__noinline int walk_chunk(__u32 room, __u32 i)
{
	struct walk_room_slot *slot;

	if (room >= WALK_ROOMS)
		return 1;
	/* The key from read-only data: its frame has no room for one. */
	slot = bpf_map_lookup_elem(&walk_room, &walk_room_keys[room]);
	return slot ? walk_one_chunk(i, &slot->value) : 1;
}

/* bpf_loop's callback: its context, the room, lies on the stack. */
static long walk_one_chunk_of(__u32 i, __u32 *room)
{
	return walk_chunk(*room, i) ? 1 : 0;
}

static __always_inline void walk_chunks(struct chunk_walk *walk)
{
	__u64 chunks = (walk->last >> CHUNK_SHIFT) - (walk->first >> CHUNK_SHIFT) + 1;
	__u32 room = walk->room;

	if (walk->last < walk->first || !use_bpf_loop)
		return;
	if (chunks == 1) {	/* most faults and reads: no loop to set up */
		walk_chunk(room, 0);
		return;
	}
	bpf_loop(MAX_CHUNKS, walk_one_chunk_of, &room, 0);
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

#endif /* PAGETRACE_PAGE_CACHE_WALK_BPF_H */
