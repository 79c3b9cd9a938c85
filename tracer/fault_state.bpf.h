/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Part of page_access.bpf.h (included by it only, after vma_lookup.bpf.h):
 * a fault, from its start to its end. Its page, when it goes to the file
 * system (mm_filemap_fault); what fault-around mapped
 * (mm_filemap_map_pages, which fires after the page-table entries are set,
 * the faulting VMA still locked: of its range, the pages the page tables
 * map that no access or map accounted for, the faulting page among them
 * its access; a large folio at either end may be mapped whole beyond it);
 * what it mapped without that tracepoint (kmem:rss_stat, resolved at its
 * end); pages read from storage; a thread's end.
 *
 * Invariants: a thread is in one fault state (enum fault_state); only a
 * fault of the thread's own has an address, so page tables to read; a
 * fault ends at the thread's next fault or system call, which first
 * resolves what it left (FAULT_MAPPED_FILE) with the VMA read during the
 * fault; a fault counts its page once (FAULT_RESOLVED: its retry counts
 * nothing); what cannot be told is counted lost, never guessed.
 */
#ifndef PAGETRACE_FAULT_STATE_BPF_H
#define PAGETRACE_FAULT_STATE_BPF_H

/* filemap:mm_filemap_fault(mapping, index): once per fault, retries too. */
static __always_inline void page_access_fault(struct address_space *mapping, __u64 index)
{
	struct chunk_walk walk = {};
	struct thread_access *ta = thread_access(true);

	if (!ta)
		return;
	if (ta->fault_state != FAULT_STARTED && ta->fault_mapping == (__u64)mapping &&
	    ta->fault_index == index)
		return;	/* the same fault, retried after the page was read */
	start_walk(&walk, mapping, OP_FAULT, index, index);
	walk_chunks(&walk);
	if (ta->fault_state == FAULT_STARTED)	/* get_user_pages()'s stays FAULT_NONE */
		ta->fault_state = FAULT_RESOLVED;
	ta->fault_mapping = (__u64)mapping;
	ta->fault_index = index;
	ta->fault_flags = (ta->fault_flags & ~FAULT_EXPECTS_READ) |
			  (walk.absent ? FAULT_EXPECTS_READ : 0);
}

/*
 * The folio at @page, its part inside [@lo, @hi], from the page tables: the
 * kernel maps a large folio whole or not at all, and only one inside the
 * VMA (chunk_map()). @walk is the fault's walk, reused.
 */
static __always_inline void map_folio_part(struct chunk_walk *walk, const struct thread_access *ta,
					   __u64 page, __u64 lo, __u64 hi)
{
	unsigned long folio = folio_at(walk, page);
	__u64 first = 0, last, nr;

	if (!folio || (nr = folio_pages((const struct folio *)folio)) < 2)
		return;
	bpf_probe_read_kernel(&first, sizeof(first), (void *)folio + page_index_offset());
	last = first + nr - 1;
	if (first < ta->vma_pgoff || last - ta->vma_pgoff >= (ta->vma_end - ta->vma_start) >> page_shift)
		return;	/* not inside the VMA: never mapped whole */
	walk->op = OP_MAPPED_WHOLE;
	walk->account_fault = false;
	walk->first = first > lo ? first : lo;
	walk->last = last < hi ? last : hi;
	walk->vm_start = ta->vma_start;
	walk->vm_pgoff = ta->vma_pgoff;
	walk_chunks(walk);
}

/*
 * Can the folio at @page begin before it (@at_start), or go on after it? A
 * folio below 64 pages lies in one leaf, its pages past the first sibling
 * slots; one of 64 pages or more, above the leaves, may always.
 */
static __always_inline bool folio_may_reach_past(struct chunk_walk *walk, __u64 page, bool at_start)
{
	__u64 e = chunk_entry(walk, page >> CHUNK_SHIFT), slot = page & (CHUNK_PAGES - 1);

	if (!xa_entry_is_node(e))
		return !(e & XA_ONLY_PAGE_0) && xa_entry_is_folio(e);
	if (!at_start && slot == CHUNK_PAGES - 1)
		return false;
	return xa_entry_is_sibling(leaf_slot(e, at_start ? slot : slot + 1));
}

/*
 * "mm/filemap: map entire large folio faultaround" (Kiryl Shutsemau, v6.18)
 * maps a large folio whole, beyond [start, end], when it lies inside the
 * VMA, one page table and the file: only the folios at the range's ends
 * can reach beyond it.
 */
static __always_inline void map_whole_folios_at_ends(struct chunk_walk *walk,
						     const struct thread_access *ta,
						     __u64 start, __u64 end)
{
	if (start > ta->vma_pgoff && folio_may_reach_past(walk, start, true))
		map_folio_part(walk, ta, start, 0, start - 1);
	if (folio_may_reach_past(walk, end, false))
		map_folio_part(walk, ta, end, end + 1, ~0ULL);
}

/* A fault's walk is held per CPU (scratch.bpf.h), not on the program's stack. */
SCRATCH_ROOM(fault_walk_room, struct chunk_walk)

/*
 * filemap:mm_filemap_map_pages(mapping, start, end). A fault-around without
 * a fault of the thread's own (get_user_pages(): MADV_POPULATE_READ, mlock,
 * a remote access) has no address, so no page tables to read: its pages
 * are not recorded as mapped.
 */
static __always_inline void page_access_map(struct address_space *mapping, __u64 start, __u64 end,
					    struct vm_fault *vmf)
{
	struct thread_access *ta = thread_access(false);
	struct chunk_walk *walk;
	__u64 index;

	if (!ta || ta->fault_state == FAULT_NONE)
		return;
	ta->fault_flags &= ~FAULT_MAPPED_FILE;	/* what it mapped is read here */
	if (vmf) {	/* fexit/filemap_map_pages (before the tracepoint): the fault's own VMA */
		if (BPF_CORE_READ(vmf, address) >> page_shift != ta->fault_address >> page_shift)
			return;
		keep_fault_vma(ta, BPF_CORE_READ(vmf, vma));
	} else if (!fault_vma(ta)) {
		on_fault_lost();	/* the maple tree gave no VMA */
		return;
	}
	index = vma_page_index(ta, ta->fault_address);
	if (ta->vma_mapping != (__u64)mapping || index < start || index > end)
		return;	/* not the range of the thread's fault */
	walk = fault_walk_room_take();
	if (!walk) {	/* nested on this CPU: what it mapped is not known */
		on_fault_lost();
		return;
	}
	start_walk(walk, mapping, OP_MAP, start, end);
	walk->fault_index = index;
	walk->account_fault = ta->fault_state == FAULT_STARTED;
	walk->vm_start = ta->vma_start;
	walk->vm_pgoff = ta->vma_pgoff;
	walk_chunks(walk);
	if (walk->served) {
		ta->fault_state = FAULT_RESOLVED;
		ta->fault_mapping = (__u64)mapping;
		ta->fault_index = index;
		ta->fault_flags &= ~FAULT_EXPECTS_READ;
	}
	map_whole_folios_at_ends(walk, ta, start, end);
	fault_walk_room_give(walk);
}

/*
 * kmem:rss_stat(mm, member) of a file's pages (the caller checks the
 * member): the thread's fault changed what its page tables map of a file.
 * Fault-around's change is read at its tracepoint, which follows at once;
 * any other (a PMD mapped by filemap_map_pmd(), which returns before it; a
 * folio mapped by finish_fault(); a shmem fault; a copy on write) when the
 * fault has ended, with the VMA read here, while the fault holds it.
 */
static __always_inline void page_access_rss(struct mm_struct *mm)
{
	struct thread_access *ta = thread_access(false);

	if (!ta || ta->fault_state == FAULT_NONE || (__u64)mm != current_mm())
		return;	/* no fault of the thread's, or one in another address space */
	fault_vma(ta);	/* none found: resolve_fault_end() counts it lost */
	ta->fault_flags |= FAULT_MAPPED_FILE;
}

/*
 * The thread's ended fault, if it mapped a file's pages that no
 * mm_filemap_map_pages showed (FAULT_MAPPED_FILE): its page, if no filemap
 * event counted it and the page tables map it, is its access; then the
 * rest of its folio (finish_fault(), do_set_pmd()). A global function:
 * verified once, in a frame of its own.
 */
__noinline int resolve_fault_end(void)
{
	struct thread_access *ta = thread_access(false);
	struct address_space *mapping;
	struct chunk_walk *walk;
	__u64 index;

	if (!ta || !(ta->fault_flags & FAULT_MAPPED_FILE))
		return 0;
	ta->fault_flags &= ~FAULT_MAPPED_FILE;
	if (ta->vma_mm != current_mm() || !vma_holds(ta, ta->fault_address)) {
		on_fault_lost();	/* its VMA was not found during the fault */
		return 0;
	}
	if (!ta->vma_mapping)
		return 0;	/* an anonymous VMA */
	mapping = (struct address_space *)ta->vma_mapping;
	index = vma_page_index(ta, ta->fault_address);
	walk = fault_walk_room_take();
	if (!walk) {	/* nested on this CPU */
		on_fault_lost();
		return 0;
	}
	start_walk(walk, mapping, OP_FAULT, index, index);
	if (ta->fault_state == FAULT_STARTED && user_page_mapped(ta->fault_address)) {
		walk_chunks(walk);
		ta->fault_state = FAULT_RESOLVED;
		ta->fault_mapping = (__u64)mapping;
		ta->fault_index = index;
	}
	if (ta->fault_state == FAULT_RESOLVED && ta->fault_mapping == (__u64)mapping &&
	    ta->fault_index == index) {
		walk->fault_index = index;
		map_folio_part(walk, ta, index, 0, ~0ULL);
	}
	fault_walk_room_give(walk);
	return 0;
}

/* raw_syscalls:sys_enter of a traced thread: its last fault has ended. */
static __always_inline void page_access_syscall_starts(void)
{
	struct thread_access *ta = thread_access(false);

	if (!ta)
		return;
	if (ta->fault_flags & FAULT_MAPPED_FILE)
		resolve_fault_end();
	ta->fault_state = FAULT_NONE;
	ta->fault_mapping = 0;
}

/*
 * task->pagefault_disabled as a fault's tracepoint sees it when the kernel
 * will handle the fault, learnt from user-mode faults (always handled;
 * kernels count their own pagefault_disable() around tracepoints or not);
 * -1 until the first. A kernel-mode fault beyond that depth
 * (faulthandler_disabled(): a nofault read, user_page_mapped()'s, this
 * tool's or another's beside it) maps nothing and must not replace the
 * thread's fault in progress.
 */
int handled_fault_depth = -1;

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

/*
 * exceptions:page_fault_user/kernel (or, on arm64, kprobe/handle_mm_fault,
 * which gives the locked @vma): a new fault starts.
 */
static __always_inline void page_access_fault_start(__u64 address, bool user_mode,
						    struct vm_area_struct *vma)
{
	struct thread_access *ta;

	if (!fault_will_be_handled(user_mode))
		return;
	ta = thread_access(true);
	if (!ta)
		return;
	if (ta->fault_flags & FAULT_MAPPED_FILE)
		resolve_fault_end();
	ta->fault_address = address & -(1ULL << page_shift);
	/* A fault on a kernel address (the top half, x86-64 and arm64) maps no file page. */
	ta->fault_state = (__s64)address < 0 ? FAULT_NONE : FAULT_STARTED;
	ta->fault_flags = 0;
	if (vma)
		keep_fault_vma(ta, vma);
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
	if (ta && (ta->fault_flags & FAULT_EXPECTS_READ) && ta->fault_mapping &&
	    (fault_mapping = (struct address_space *)ta->fault_mapping) &&
	    BPF_CORE_READ(fault_mapping, host) == inode &&
	    ta->fault_index >= walk.first && ta->fault_index <= walk.last) {
		walk.skip_index = ta->fault_index;
		ta->fault_flags &= ~FAULT_EXPECTS_READ;
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
 * sched_process_exit, in the exiting thread, whose memory is gone: a fault
 * left to resolve (a thread killed right after it) is lost. Task storage
 * goes with its task, a hash entry does not.
 */
static __always_inline void page_access_exit(__u32 tid)
{
	struct thread_access *ta = thread_access(false);

	if (ta && (ta->fault_flags & FAULT_MAPPED_FILE))
		on_fault_lost();
	thread_storage_forget(&thread_accesses, tid);
}

#endif /* PAGETRACE_FAULT_STATE_BPF_H */
