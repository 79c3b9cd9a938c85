/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A module of the page-access engine (page_access.bpf.h), on the chunk walk:
 * pages read from storage (the cache tools' block_bio_queue), pending until
 * their first access, which is a miss; every other access is a hit.
 *
 * Invariant: a page read for the thread's fault in progress is not pending:
 * that fault counted it as its miss already (fault_expects_read).
 */
#ifndef PAGETRACE_PENDING_PAGES_BPF_H
#define PAGETRACE_PENDING_PAGES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "page_math.bpf.h"
#include "page_state.bpf.h"
#include "sinks.bpf.h"
#include "page_cache_walk.bpf.h"

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

#endif /* PAGETRACE_PENDING_PAGES_BPF_H */
