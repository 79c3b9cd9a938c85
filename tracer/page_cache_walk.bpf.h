/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Part of page_access.bpf.h (included by it only, after its state and hooks):
 * which pages the page cache holds (its xarray), which pages the current
 * task's page tables map (ptes_mapped()), and the walk over the 64-page
 * chunks of page_states that every entry point shares (struct chunk_walk).
 *
 * Invariants: a chunk walk covers [first, last] of one mapping, one chunk of 64
 * pages at a time, at most MAX_CHUNKS (longer is on_walk_cut_short()); a page
 * is an access at most once per walk; a page's state changes only here; a page
 * is mapped only if the page tables map it when the walk reads them.
 */
#ifndef PAGETRACE_PAGE_CACHE_WALK_BPF_H
#define PAGETRACE_PAGE_CACHE_WALK_BPF_H

enum chunk_op { OP_READ_CALL, OP_FAULT, OP_MAP, OP_MAPPED_WHOLE };

struct chunk_walk {
	struct address_space *mapping;
	struct inode *inode;
	struct page_chunk_key key;
	__u64 first, last;	/* pages, inclusive */
	__u64 fault_index;	/* OP_MAP, OP_MAPPED_WHOLE: the faulting page, or -1 */
	__u64 counted;		/* OP_READ_CALL with count_hits: next page to count */
	__u64 vm_start, vm_pgoff; /* OP_MAP, OP_MAPPED_WHOLE: the faulting VMA */
	__u64 entry_of, entry;	/* xa_chunk_entry() of chunk entry_of - 1 (0: none yet) */
	__u32 op;
	bool account_fault;	/* OP_MAP: the faulting page is this fault's access */
	bool served;		/* OP_MAP: fault-around mapped the faulting page */
	bool absent;		/* OP_FAULT: the page is not in the cache yet */
};

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

/*
 * Which slots of @span of the leaf node @node hold a folio (a sibling slot
 * is a page of the large folio whose first slot it names). A global
 * function: verified once, whatever its callers.
 */
__noinline __u64 leaf_present(__u64 node, __u64 span)
{
	__u64 slots = node + bpf_core_field_offset(struct xa_node, slots), present = 0;
	__u32 zero = 0, lo, n, head;
	struct xa_slots *buf;
	unsigned long e;

	if (!span)
		return 0;
	lo = fls64(span & -span) - 1;	/* the lowest set bit */
	n = fls64(span) - lo;
	buf = bpf_map_lookup_elem(&xa_slot_buf, &zero);
	if (lo > 63 || n < 1 || n > CHUNK_PAGES || !buf ||
	    bpf_probe_read_kernel(buf->slot, n * sizeof(__u64), (void *)(slots + lo * sizeof(__u64))))
		return 0;
	for (__u32 i = 0; i < CHUNK_PAGES && i < n; i++) {
		e = buf->slot[i];
		head = (e >> 2) & 63;
		if (xa_entry_is_sibling(e) && head >= lo && head < lo + i)
			e = buf->slot[(head - lo) & 63];
		else if (xa_entry_is_sibling(e))	/* its first slot lies before @span */
			bpf_probe_read_kernel(&e, sizeof(e), (void *)(slots + head * sizeof(__u64)));
		if (xa_entry_is_folio(e))
			present |= 1ULL << ((lo + i) & 63);
	}
	return present;
}

/* xa_chunk_entry()'s mark on a folio that covers page 0 only (folios are 64-byte aligned). */
#define XA_ONLY_PAGE_0	4UL

/*
 * Down an xarray, from its head @head, to chunk @chunk (XA_CHUNK_SIZE is 64:
 * a leaf node covers one chunk). Returns the entry that covers the chunk:
 * the leaf node's, a folio of 64 pages or more from above, the one small
 * folio of a tree without nodes (XA_ONLY_PAGE_0), or 0. A global function;
 * its arguments are scalars (kernels before v5.12 take no pointer).
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
		 * chunk 0 alone, and must not answer for another chunk.
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

/* xa_chunk_entry() of @chunk of the walk's mapping, read once a walk. */
static __always_inline __u64 chunk_entry(struct chunk_walk *walk, __u64 chunk)
{
	/* Outside BPF_CORE_READ(): chunk_walk is ours, not a kernel type to relocate. */
	struct address_space *mapping = walk->mapping;

	if (walk->entry_of != chunk + 1) {
		walk->entry = xa_chunk_entry((__u64)BPF_CORE_READ(mapping, i_pages.xa_head), chunk);
		walk->entry_of = chunk + 1;
	}
	return walk->entry;
}

/* Which pages of @chunk (of those in @span) are in the walk's mapping's page cache. */
static __always_inline __u64 cache_present(struct chunk_walk *walk, __u64 chunk, __u64 span)
{
	__u64 e = chunk_entry(walk, chunk);

	if (xa_entry_is_node(e))
		return leaf_present(e - 2, span);
	if (!xa_entry_is_folio(e & ~XA_ONLY_PAGE_0))
		return 0;
	return e & XA_ONLY_PAGE_0 ? 1 : ~0ULL;
}

/* Slot @slot of the leaf node whose entry is @e. */
static __always_inline unsigned long leaf_slot(__u64 e, __u64 slot)
{
	unsigned long s = 0;

	bpf_probe_read_kernel(&s, sizeof(s), (void *)(e - 2 + bpf_core_field_offset(struct xa_node,
		slots) + (slot & (CHUNK_PAGES - 1)) * sizeof(__u64)));
	return s;
}

/* The folio at page @index of the walk's mapping, or 0. */
static __always_inline unsigned long folio_at(struct chunk_walk *walk, __u64 index)
{
	__u64 leaf = chunk_entry(walk, index >> CHUNK_SHIFT), e = leaf;

	if (xa_entry_is_node(leaf)) {
		e = leaf_slot(leaf, index);
		if (xa_entry_is_sibling(e))
			e = leaf_slot(leaf, e >> 2);
	} else if ((e & XA_ONLY_PAGE_0) && index) {
		return 0;
	}
	e &= ~XA_ONLY_PAGE_0;
	return xa_entry_is_folio(e) ? e : 0;
}

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
	__u32 hits = 0, misses = 0;
	__u64 first, run;
	__u64 lo = walk->counted > (walk->key.chunk << CHUNK_SHIFT) ?
		   walk->counted - (walk->key.chunk << CHUNK_SHIFT) : 0;
	bool stop = false;

	if (count_hits) {
		if (lo > 63)
			return 0;
		run = cache_present(walk, walk->key.chunk, mask) >> lo;
		run = (run & ~(run + 1)) << lo;	/* consecutive present pages from lo */
		stop = (run & mask) != (mask & ~((1ULL << lo) - 1));
		mask &= run;
		if (mask)
			walk->counted = (walk->key.chunk << CHUNK_SHIFT) + fls64(mask);
	}
	/* The cache tools too keep every accessed page: one is never mapped after. */
	state = chunk_state(&walk->key, mask != 0);
	first = mark_accessed(state, mask, &hits, &misses);
	if (mask && (first || count_hits))
		on_access(walk->inode, &walk->key, first, hits, misses, ACCESS_BY_READ);
	return stop;
}

static __always_inline int chunk_fault(struct chunk_walk *walk, __u64 mask)
{
	struct page_chunk *state;
	__u32 hits = 0, misses = 0;
	__u64 first;

	if (count_hits)
		walk->absent = !(cache_present(walk, walk->key.chunk, mask) & mask);
	state = chunk_state(&walk->key, true);	/* see chunk_read_call() */
	first = mark_accessed(state, mask, &hits, &misses);
	if (walk->absent && !misses)
		hits = 0, misses = 1;	/* this fault reads it: a miss */
	on_access(walk->inode, &walk->key, first, hits, misses, ACCESS_BY_FAULT);
	return 1;
}

/*
 * Is @addr mapped in the current task's page tables? bpf_probe_read_user()
 * reads with page faults disabled (copy_from_user_nofault()): it succeeds
 * only through a present entry, on any architecture. A failed read is a
 * fault the kernel does not handle, which page_access_fault_start() ignores.
 */
static __always_inline bool user_page_mapped(__u64 addr)
{
	char byte;

	return !bpf_probe_read_user(&byte, sizeof(byte), (const void *)addr);
}

/*
 * Of the pages @bits of a chunk whose first page would lie at @page0, those
 * the current task's page tables map. A global function: verified once.
 */
__noinline __u64 ptes_mapped(__u64 page0, __u64 bits)
{
	__u64 mapped = 0;

	for (__u32 i = 0; i < CHUNK_PAGES; i++) {
		if (!(bits >> i))
			break;
		if (((bits >> i) & 1) && user_page_mapped(page0 + ((__u64)i << page_shift)))
			mapped |= 1ULL << i;
	}
	return mapped;
}

/*
 * The pages of this chunk the fault mapped, of those no access or map
 * accounts for yet: OP_MAP (fault-around's range), those the page cache
 * holds and the faulting VMA's page tables map now (a page the cache lacks
 * is mapped by no page table, and reading an unmapped one costs a page
 * fault); OP_MAPPED_WHOLE (a large folio's pages beyond what the fault
 * surely mapped: the kernel maps a folio whole or not at all), all of them
 * if the page tables map one. The faulting page among them is the fault's
 * access when the walk accounts for it; the others are mapped.
 */
static __always_inline int chunk_map(struct chunk_walk *walk, __u64 mask)
{
	__u64 base = walk->key.chunk << CHUNK_SHIFT, fault_bit = 0, known = 0, accessed = 0;
	__u64 address = walk->vm_start + ((base - walk->vm_pgoff) << page_shift);	/* of base */
	__u64 want, mapped, new_map, first;
	struct page_chunk *state = chunk_state(&walk->key, false);
	__u32 hits = 0, misses = 0;

	if (walk->fault_index - base < CHUNK_PAGES)
		fault_bit = 1ULL << (walk->fault_index - base);
	if (state) {
		accessed = state->accessed;
		known = accessed | state->mapped;
	}
	want = mask & ~known & ~fault_bit;
	/* trace records a first access only; the cache tools count every one. */
	if (walk->account_fault && (count_hits || !(accessed & fault_bit)))
		want |= mask & fault_bit;
	if (!want)
		return 0;
	if (walk->op == OP_MAPPED_WHOLE)
		mapped = ptes_mapped(address, want & -want) ? want : 0;
	else
		mapped = ptes_mapped(address, cache_present(walk, walk->key.chunk, want) & want);
	if (!mapped || !(state = state ?: chunk_state(&walk->key, true)))
		return walk->op == OP_MAPPED_WHOLE;	/* not mapped whole: no more chunks */
	if (mapped & fault_bit) {
		walk->served = true;
		first = mark_accessed(state, fault_bit, &hits, &misses);
		on_access(walk->inode, &walk->key, first, hits, misses, ACCESS_BY_FAULT);
	}
	new_map = mapped & ~fault_bit & ~state->accessed & ~state->mapped;
	state->mapped |= new_map;
	if (new_map)
		on_map(walk->inode, &walk->key, new_map);
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
	default:
		return chunk_map(walk, mask);
	}
}

/*
 * bpf_loop's callback, and the one-chunk walk's function: its context lies
 * on the stack, as bpf_loop requires; the walk may not (scratch.bpf.h).
 */
static __noinline long walk_one_chunk_of(__u32 i, struct chunk_walk **walk)
{
	return walk_one_chunk(i, *walk);
}

static __always_inline void walk_chunks(struct chunk_walk *walk)
{
	__u64 chunks = (walk->last >> CHUNK_SHIFT) - (walk->first >> CHUNK_SHIFT) + 1;

	if (walk->last < walk->first || !use_bpf_loop)
		return;
	if (chunks == 1) {	/* most faults and reads: no loop to set up */
		walk_one_chunk_of(0, &walk);
		return;
	}
	bpf_loop(MAX_CHUNKS, walk_one_chunk_of, &walk, 0);
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
	walk->entry_of = 0;
}

#endif /* PAGETRACE_PAGE_CACHE_WALK_BPF_H */
