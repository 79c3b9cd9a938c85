/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A module of the page-access engine (page_access.bpf.h): a fault's VMA and its
 * file page (struct vma_lookup, bpf_find_vma()'s callback), and the VMA
 * that holds an address of the current address space read from its maple
 * tree (mm->mm_mt) without the mmap lock, as lock_vma_under_rcu() reads it.
 * The maple tree is read for a fault-around whose bpf_find_vma() found the
 * mmap lock busy: chromium's threads map and unmap while others fault
 * (docs/lab/tracer-measurements.md, "Browsers' lost faults").
 *
 * Invariants: a walk reads each node once, top down, as mtree_lookup_walk()
 * does; BPF programs run under rcu_read_lock(), so a node it reaches stays
 * allocated while it runs, and a node replaced meanwhile ("dead": its parent
 * pointer is itself) sends the walk back to the root, as the kernel's
 * walkers do (MAPLE_WALK_TRIES walks, then no answer). An answer is a VMA
 * of the current address space that holds the address (checked after the
 * walk).
 * Asked during the fault at that address: the faulting VMA is then
 * locked (its per-VMA lock or the mmap lock), neither moved nor unmapped
 * nor resized, so its fields are read whole. (A remote fault, GUP on
 * another address space, finds at most a VMA of the current one, which
 * the caller's check of its file and page turns down, as it turns down
 * bpf_find_vma()'s.) Asked after a fault, by vma_after_fault().
 */
#ifndef PAGETRACE_VMA_LOOKUP_BPF_H
#define PAGETRACE_VMA_LOOKUP_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "page_math.bpf.h"
#include "page_cache_walk.bpf.h"

/* bpf_find_vma()'s error while the mmap lock is busy: -EBUSY. */
#define BPF_EBUSY	16

struct vma_lookup {
	__u64 address;
	__u64 mapping;	/* 0: an anonymous VMA */
	__u64 index;
	__u64 start, end;	/* the VMA */
	__u64 pgoff;
};

/* The current task's address space (its mm_struct), as a number. */
static __always_inline __u64 current_mm(void)
{
	return (__u64)BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), mm);
}

/* The page of @lookup's file at its address, from its VMA's start and pgoff. */
static __always_inline __u64 vma_page_index(const struct vma_lookup *lookup)
{
	return ((lookup->address - lookup->start) >> page_shift) + lookup->pgoff;
}

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
	lookup->index = vma_page_index(lookup);
	return 0;
}

/* include/linux/maple_tree.h: a node pointer's low byte holds its type. */
#define MAPLE_NODE_MASK		255UL
#define MAPLE_NODE_TYPE_SHIFT	3
#define MAPLE_NODE_TYPE_MASK	0xf
/*
 * Levels walked at most: 8 levels of half-full nodes (5 of an internal
 * node's 10 slots, 8 of a leaf's 16) hold over 600,000 VMAs; a process has
 * at most vm.max_map_count, 65,530 by default.
 */
#define MAPLE_WALK_LEVELS	8
#define MAPLE_MAX_PIVOTS	15
/* maple_tree_entry()'s answer when a node was replaced under the walk. */
#define MAPLE_WALK_AGAIN	1
/*
 * Walks from the root before giving up: a thread that maps and unmaps in
 * a loop replaced a node under 3 of about 1,500 walks (mmap-contend --unmap).
 */
#define MAPLE_WALK_TRIES	4

/*
 * The slot of the node whose @n pivots begin at @pivots that covers
 * @address: the first whose pivot (its range's last address) is at or
 * above it, else the last (@n). A global function: checked once.
 */
__noinline __u32 maple_slot_of(__u64 pivots, __u32 n, __u64 address)
{
	__u64 pivot;

	for (__u32 i = 0; i < MAPLE_MAX_PIVOTS; i++) {
		if (i >= n)
			return n;
		if (bpf_probe_read_kernel(&pivot, sizeof(pivot), (void *)(pivots + i * 8)))
			return MAPLE_MAX_PIVOTS + 1;
		if (pivot >= address)
			return i;
	}
	return n;
}

/*
 * The entry that covers @address in the maple tree whose root entry is
 * @root (a VMA's address in mm->mm_mt); MAPLE_WALK_AGAIN if a node was
 * replaced under the walk (the kernel's walkers start again from the
 * root); else 0: empty, or deeper than MAPLE_WALK_LEVELS. A global function:
 * the verifier checks it once, not at each caller.
 */
__noinline __u64 maple_tree_entry(__u64 root, __u64 address)
{
	__u64 entry = root, node, parent;
	__u32 type, n, slot, pivots, slots;

	/*
	 * Its own check of the kernel's type, as its caller's: the verifier
	 * checks a global function alone. The root is a node (mt_mk_root():
	 * an xarray node entry), not a single entry at address 0.
	 */
	if (!bpf_core_field_exists(struct mm_struct___maple, mm_mt) || !xa_entry_is_node(root))
		return 0;
	for (int level = 0; level < MAPLE_WALK_LEVELS; level++) {
		if (entry < 4096)
			return 0;	/* an empty slot, or a reserved entry */
		node = entry & ~MAPLE_NODE_MASK;
		type = (entry >> MAPLE_NODE_TYPE_SHIFT) & MAPLE_NODE_TYPE_MASK;
		if (type == bpf_core_enum_value(enum maple_type___pagetrace,
						maple_arange_64___pagetrace)) {
			n = bpf_core_field_size(struct maple_arange_64___pagetrace, pivot) / 8;
			pivots = bpf_core_field_offset(struct maple_arange_64___pagetrace, pivot);
			slots = bpf_core_field_offset(struct maple_arange_64___pagetrace, slot);
		} else if (type == bpf_core_enum_value(enum maple_type___pagetrace,
						       maple_range_64___pagetrace) ||
			   type == bpf_core_enum_value(enum maple_type___pagetrace,
						       maple_leaf_64___pagetrace)) {
			n = bpf_core_field_size(struct maple_range_64___pagetrace, pivot) / 8;
			pivots = bpf_core_field_offset(struct maple_range_64___pagetrace, pivot);
			slots = bpf_core_field_offset(struct maple_range_64___pagetrace, slot);
		} else {
			return 0;	/* a dense node: never in an mm's tree */
		}
		slot = maple_slot_of(node + pivots, n, address);
		if (slot > MAPLE_MAX_PIVOTS ||
		    bpf_probe_read_kernel(&entry, sizeof(entry), (void *)(node + slots + slot * 8)) ||
		    bpf_probe_read_kernel(&parent, sizeof(parent), (void *)node))
			return 0;
		if ((parent & ~MAPLE_NODE_MASK) == node)
			return MAPLE_WALK_AGAIN;	/* dead: replaced while the walk read it */
		if (type == bpf_core_enum_value(enum maple_type___pagetrace,
						maple_leaf_64___pagetrace))
			return entry;
	}
	return 0;
}

/*
 * @lookup's VMA from the current address space's maple tree; false if the
 * kernel has none or the walk found no VMA of this address space that
 * holds the address (@lookup's VMA fields then as they were, or zero).
 * Call it only during the fault at @lookup->address (see the invariants
 * above).
 */
static __always_inline bool vma_from_maple_tree(struct vma_lookup *lookup)
{
	struct mm_struct___maple *mm = (void *)current_mm();
	struct vm_area_struct *vma;

	if (!mm || !bpf_core_field_exists(struct mm_struct___maple, mm_mt))
		return false;
	for (int i = 0; i < MAPLE_WALK_TRIES; i++) {
		vma = (void *)maple_tree_entry((__u64)BPF_CORE_READ(mm, mm_mt.ma_root),
					       lookup->address);
		if ((__u64)vma != MAPLE_WALK_AGAIN)
			break;
	}
	if ((__u64)vma <= MAPLE_WALK_AGAIN || (__u64)BPF_CORE_READ(vma, vm_mm) != (__u64)mm)
		return false;
	vma_file_page(NULL, vma, lookup);
	if (lookup->address - lookup->start < lookup->end - lookup->start)
		return true;
	lookup->mapping = lookup->start = lookup->end = 0;
	return false;
}

/* @lookup with its address only, for a lookup of its own; returned. */
static __always_inline struct vma_lookup *vma_lookup_reset(struct vma_lookup *lookup)
{
	*lookup = (struct vma_lookup){ .address = lookup->address };
	return lookup;
}

/*
 * @lookup's VMA after its fault has ended (a silent fault, or the folio of
 * a fault filemap_fault() served, looked at at the thread's next fault or
 * system call), when its VMA is no longer locked:
 * another thread may be changing it. An anonymous VMA is taken at once
 * (vm_file is set before a VMA is inserted and never changes); a file's
 * only if a second walk finds a VMA with the same range, pgoff and
 * file, so that a range read while a split or merge rewrote it is not
 * taken. False: no answer (then bpf_find_vma(), under the mmap lock).
 */
static __always_inline bool vma_after_fault(struct vma_lookup *lookup)
{
	struct vma_lookup again = { .address = lookup->address };

	if (!vma_from_maple_tree(lookup))
		return false;
	if (!lookup->mapping)
		return true;
	return vma_from_maple_tree(&again) && again.start == lookup->start &&
	       again.end == lookup->end && again.pgoff == lookup->pgoff &&
	       again.mapping == lookup->mapping;
}

/*
 * @lookup's VMA once its fault has ended: the maple tree first
 * (vma_after_fault()), since at a page_fault_* tracepoint interrupts are
 * off and bpf_find_vma() costs an irq_work a call; else under the mmap
 * lock. 0: found; else bpf_find_vma()'s error (-BPF_EBUSY: the lock was busy).
 */
static __always_inline long vma_lookup_after_fault(struct vma_lookup *lookup)
{
	if (vma_after_fault(lookup))
		return 0;
	return bpf_find_vma(current_task(), lookup->address, vma_file_page,
			    vma_lookup_reset(lookup), 0);
}

#endif /* PAGETRACE_VMA_LOOKUP_BPF_H */
