/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A module of the page-access engine (page_access.bpf.h): a fault's access
 * and the pages it mapped, read where the kernel sets them in the page
 * tables, on kernels where fentry attaches there (the loader decides at run
 * time, trace_load.c and cache_load.c; elsewhere fault_around.bpf.h infers
 * the same from the fault events).
 *
 * set_pte_range(vmf, folio, page, nr, addr) maps @nr pages of @folio from
 * @page: fault-around's runs (filemap_map_pages()) and a served fault's
 * page or folio (finish_fault()); before it, do_set_pte(vmf, page, addr)
 * maps one page. do_set_pmd() maps a PMD-sized folio whole when it
 * returns 0. Of the pages so mapped, the fault's own, vmf->pgoff of the
 * faulting VMA's file, is the access; the others are mapped. A COW fault
 * maps an anonymous copy of the file's page vmf->pgoff: that page is the
 * access, and nothing of the file is mapped.
 *
 * Invariants: a page is counted where it is mapped, once per mapping; the
 * fault's page is an access only in the call that maps it (a retried
 * fault maps it once), and no state is kept between events.
 */
#ifndef PAGETRACE_PTE_HOOKS_BPF_H
#define PAGETRACE_PTE_HOOKS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "page_math.bpf.h"
#include "page_state.bpf.h"
#include "sinks.bpf.h"
#include "page_cache_walk.bpf.h"

/*
 * The chunks a set_pte_range() can reach: PTRS_PER_PTE pages, unaligned;
 * 2,048 with 16 KiB pages. A longer range is counted cut short.
 */
#define PTE_RANGE_CHUNKS	(2048 / CHUNK_PAGES + 1)

/*
 * The loader's choice: the fault events of fault_around.bpf.h count
 * nothing when these hooks are attached (trace's mm_filemap_fault
 * program stays for the cause column).
 */
const volatile bool faults_from_ptes = false;

/* @mask of one chunk mapped, @fault_bit of it the fault's page (or 0). */
static __always_inline void pte_chunk_mapped(struct inode *inode, struct page_chunk_key *key,
					     __u64 mask, __u64 fault_bit)
{
	struct page_chunk *state = chunk_state(key, true);
	__u32 hits = 0, misses = 0;
	__u64 first, new_map;

	if (!state)
		return;	/* counted lost by chunk_state() */
	if (mask & fault_bit) {
		first = mark_accessed(state, fault_bit, &hits, &misses);
		on_access(inode, key, &(struct chunk_access){ first, hits, misses,
							      ACCESS_BY_FAULT });
	}
	new_map = mask & ~fault_bit & ~state->accessed & ~state->mapped;
	state->mapped |= new_map;
	if (new_map)
		on_map(inode, key, new_map);
}

/* A run of mapped pages, walked a chunk at a time (pte_range_chunk()). */
struct pte_range {
	struct inode *inode;
	struct page_chunk_key key;
	__u64 first, end;	/* pages [first, end) */
	__u64 fault;		/* the fault's page, or -1 */
};

/* bpf_loop's callback: chunk @i of @r; verified once, wherever called. */
static long pte_range_chunk(__u32 i, struct pte_range *r)
{
	__u64 chunk = (r->first >> CHUNK_SHIFT) + i, base = chunk << CHUNK_SHIFT, fault_bit = 0;

	if (base >= r->end)
		return 1;
	if (r->fault >= base && r->fault < base + CHUNK_PAGES)
		fault_bit = 1ULL << (r->fault - base);
	r->key.chunk = chunk;
	pte_chunk_mapped(r->inode, &r->key, range_mask(chunk, r->first, r->end - 1), fault_bit);
	return 0;
}

/* Pages [@first, @first + @nr) of @mapping mapped; @fault: the fault's page, or -1. */
static __always_inline void pte_pages_mapped(struct address_space *mapping, __u64 first,
					     __u64 nr, __u64 fault)
{
	struct pte_range r = { .first = first, .end = first + nr, .fault = fault };

	r.inode = BPF_CORE_READ(mapping, host);
	file_id_of(r.inode, &r.key.file);
	if (bpf_loop(PTE_RANGE_CHUNKS, pte_range_chunk, &r, 0) == PTE_RANGE_CHUNKS &&
	    ((first >> CHUNK_SHIFT) + PTE_RANGE_CHUNKS) << CHUNK_SHIFT < r.end)
		on_walk_cut_short();
}

/* The folio that holds @page: itself, or the head its compound word names. */
static __always_inline unsigned long folio_of_page(unsigned long page)
{
	unsigned long word = 0;

	bpf_probe_read_kernel(&word, sizeof(word), (void *)page + page_compound_offset());
	return word & 1 ? compound_head_of(page, word) : page;
}

/*
 * @nr pages mapped from @page on, @folio the folio that holds it
 * (set_pte_range(), do_set_pte(), a successful do_set_pmd()). Only fentry
 * and fexit programs call it: @vmf is a BTF pointer, read directly (a
 * faulting load reads 0), with no helper call; @folio and @page are
 * addresses (bpf_get_func_arg(): the verifier allows no arithmetic on a
 * BTF pointer), read with probe reads.
 */
static __always_inline void page_access_ptes_set(struct vm_fault *vmf, unsigned long folio,
						 unsigned long page, __u64 nr)
{
	unsigned long mapping = (unsigned long)BPF_CORE_READ((struct folio *)folio, mapping);
	struct file *vm_file = vmf->vma->vm_file;
	struct address_space *file = vm_file ? vm_file->f_mapping : NULL;
	__u64 fault = vmf->pgoff, first;

	if (mapping & MAPPING_FLAG_BITS) {
		/* An anonymous folio: a COW fault's copy of the file's page. */
		if (file && vmf->cow_page)
			pte_pages_mapped(file, fault, 1, fault);
		return;
	}
	if (!mapping)
		return;
	if ((unsigned long)file != mapping)
		fault = -1;
	first = BPF_CORE_READ((struct folio *)folio, index) +
		page_nr_in_folio((struct page *)page, (struct folio *)folio);
	pte_pages_mapped((struct address_space *)mapping, first, nr, fault);
}

#endif /* PAGETRACE_PTE_HOOKS_BPF_H */
