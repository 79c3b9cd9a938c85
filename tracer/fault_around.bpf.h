/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A module of the page-access engine (page_access.bpf.h), on read_calls: a
 * fault's access and its fault-around. filemap:mm_filemap_fault is the access
 * of the faulting page; filemap:mm_filemap_map_pages maps a range, of which the
 * faulting page (found from the fault's address and its VMA, struct
 * vma_lookup) is the access and the rest is mapped. docs/fault-path.md draws
 * the fault states.
 *
 * Invariants: a thread is in one fault state (enum fault_state); FAULT_RESOLVED
 * names the mapping and page that fault counted, so that its retry counts
 * nothing; a fault-around whose fault's VMA cannot be found is counted
 * lost, never guessed.
 */
#ifndef PAGETRACE_FAULT_AROUND_BPF_H
#define PAGETRACE_FAULT_AROUND_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "thread_storage.bpf.h"
#include "scratch.bpf.h"
#include "page_math.bpf.h"
#include "page_state.bpf.h"
#include "sinks.bpf.h"
#include "page_cache_walk.bpf.h"
#include "read_calls.bpf.h"
#include "vma_lookup.bpf.h"

/* filemap:mm_filemap_fault(mapping, index): once per fault, retries too. */
static __always_inline void page_access_fault(struct address_space *mapping, __u64 index)
{
	struct thread_access *ta = thread_access(true);
	struct chunk_walk *walk;

	if (!ta)
		return;
	if (ta->fault_state == FAULT_RESOLVED && ta->fault_mapping == (__u64)mapping &&
	    ta->fault_index == index)
		return;	/* the same fault, retried after the page was read */
	walk = walk_room_take(ROOM_FAULT);
	if (!walk) {	/* nested on this CPU: its page is not counted */
		on_fault_lost();
		return;
	}
	start_walk(walk, mapping, OP_FAULT, index, index);
	walk_chunks(walk);
	ta->fault_state = FAULT_RESOLVED;
	ta->fault_mapping = (__u64)mapping;
	ta->fault_index = index;
	ta->fault_expects_read = walk->absent;
	ta->fault_folio_check = 1;
	walk_room_give(walk);
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
	    bpf_find_vma(current_task(), vma->address, vma_file_page, vma, 0) == -BPF_EBUSY &&
	    !vma_from_maple_tree(vma))
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
 * page is then recorded as mapped, not accessed (docs/lab/fault-path-cases.md,
 * "6.1: the fault's VMA from fexit's vm_fault").
 */
static __always_inline bool vma_from_fault(struct vm_fault *vmf, struct vma_lookup *lookup)
{
	if (!vmf || BPF_CORE_READ(vmf, address) >> page_shift != lookup->address >> page_shift)
		return false;
	vma_file_page(NULL, BPF_CORE_READ(vmf, vma), lookup);
	return true;
}

/*
 * The thread's last VMA of its kind (a file's or anonymous), found by a
 * lookup that began when mapping_calls was @calls: current while it
 * still is. Two, since a thread's faults alternate between its heap and
 * the libraries it runs.
 */
static __always_inline void remember_vma(struct thread_access *ta, const struct vma_lookup *lookup,
					 __u64 calls)
{
	struct thread_vma *vma = &ta->vma[lookup->mapping ? THREAD_VMA_FILE : THREAD_VMA_ANON];

	vma->calls = calls;
	vma->mapping = lookup->mapping;
	vma->start = lookup->start;
	vma->end = lookup->end;
	vma->pgoff = lookup->pgoff;
}

static __always_inline bool thread_vma_holds(const struct thread_vma *vma, __u64 address)
{
	return address - vma->start < vma->end - vma->start;
}

/* @lookup from a VMA of the thread's, which holds its address. */
static __always_inline void vma_from_thread(const struct thread_vma *vma, struct vma_lookup *lookup)
{
	lookup->mapping = vma->mapping;
	lookup->start = vma->start;
	lookup->end = vma->end;
	lookup->pgoff = vma->pgoff;
	lookup->index = vma_page_index(lookup);
}

/* The thread's VMA that holds @address and is current at @calls, or NULL. */
static __always_inline struct thread_vma *thread_vma_at(struct thread_access *ta, __u64 address,
							 __u64 calls)
{
	for (int i = 0; i < THREAD_VMAS; i++)
		if (ta->vma[i].calls == calls && thread_vma_holds(&ta->vma[i], address))
			return &ta->vma[i];
	return NULL;
}

/*
 * The VMA at @lookup->address of the thread's fault, at fault-around
 * (@in_fault), or once the fault has ended. 0: found; else the lookup's
 * error (-BPF_EBUSY: the lock was busy). The thread's last VMAs need no
 * lookup at all while no call that may map a file has started since it
 * was found (mapping_calls, read_calls.bpf.h): the fault storm's
 * fault-arounds and a thread's faults in its anonymous memory then take
 * no lock and walk no tree (bench/bench_trace.py --profile). Else
 * bpf_find_vma() takes the mmap lock with a trylock, which fails while
 * another thread of the process holds it for writing or waits for it
 * (mmap, munmap, mprotect): during the fault the maple tree is read then
 * (vma_lookup.bpf.h); once it has ended the tree is read first
 * (vma_lookup_after_fault()).
 */
static __always_inline long thread_fault_vma(struct thread_access *ta, struct vma_lookup *lookup,
					     bool in_fault)
{
	__u64 calls = mapping_calls;	/* before: one may start during the lookup */
	struct thread_vma *vma = thread_vma_at(ta, lookup->address, calls);
	long err;

	if (vma) {
		vma_from_thread(vma, lookup);
		return 0;
	}
	if (in_fault) {
		err = bpf_find_vma(current_task(), lookup->address, vma_file_page, lookup, 0);
		if (err && vma_from_maple_tree(lookup))
			err = 0;
	} else {
		err = vma_lookup_after_fault(lookup);
	}
	if (!err)
		remember_vma(ta, lookup, calls);
	return err;
}

/*
 * thread_fault_vma(), and failing it the thread's last file VMA if it
 * holds the address: the caller's check that the page lies in
 * fault-around's range catches a VMA replaced since.
 */
static __always_inline long fault_vma(struct thread_access *ta, struct vma_lookup *lookup,
				      bool in_fault)
{
	struct thread_vma *file = &ta->vma[THREAD_VMA_FILE];
	long err = thread_fault_vma(ta, lookup, in_fault);

	if (err && file->mapping && thread_vma_holds(file, lookup->address))
		vma_from_thread(file, lookup);
	return err;
}

/*
 * Fault-around whose fault's VMA was not found: bpf_find_vma() busy, no
 * answer from the maple tree, and not in the thread's last file VMA. Which
 * page faulted is unknown: the range is walked, each page it maps counted
 * mapped, and the fault lost. On 6.18 the maple tree answered every such
 * lookup (docs/lab/trace-load-and-cost.md, "Deleting the deferred
 * fault-arounds").
 */
static __always_inline void fault_around_lost(struct thread_access *ta)
{
	on_fault_lost();
	ta->fault_state = FAULT_NONE;
}

/* Fault-around of [start, end] of @mapping, walked with @walk (zeroed). */
static __always_inline void map_range(struct chunk_walk *walk, struct address_space *mapping,
				      __u64 start, __u64 end, struct vm_fault *vmf)
{
	struct thread_access *ta = thread_access(false);
	struct vma_lookup lookup = {};

	start_walk(walk, mapping, OP_MAP, start, end);
	if (ta && ta->fault_state == FAULT_STARTED && ta->fault_address) {
		lookup.address = ta->fault_address;
		if (!vma_from_fault(vmf, &lookup))
			fault_vma(ta, &lookup, true);
		if (!lookup.end)
			fault_around_lost(ta);
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
			walk->fault_index = lookup.index;
			walk->account_fault = true;
		}
	} else if (ta && ta->fault_state == FAULT_RESOLVED && ta->fault_mapping == (__u64)mapping) {
		walk->fault_index = ta->fault_index;	/* a retry: not mapped "without a fault" */
		lookup.address = ta->fault_address;	/* its VMA, only if a folio needs it */
	}
	walk_chunks(walk);
	if (ta && walk->served) {
		ta->fault_state = FAULT_RESOLVED;
		ta->fault_mapping = (__u64)mapping;
		ta->fault_index = walk->fault_index;
		ta->fault_expects_read = 0;
	}
	if (lookup.address)
		page_access_map_whole_folios(walk, start, end, &lookup);
}

/* filemap:mm_filemap_map_pages(mapping, start, end): fault-around. */
static __always_inline void page_access_map(struct address_space *mapping, __u64 start, __u64 end,
					    struct vm_fault *vmf)
{
	struct chunk_walk *walk = walk_room_take(ROOM_MAP);

	if (!walk) {	/* nested on this CPU: what it mapped is not known */
		on_fault_lost();
		return;
	}
	map_range(walk, mapping, start, end, vmf);
	walk_room_give(walk);
}

#endif /* PAGETRACE_FAULT_AROUND_BPF_H */
