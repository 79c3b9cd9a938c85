/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Part of page_access.bpf.h (included by it only): the VMA of the thread's
 * fault, read during the fault into the thread's vma_* fields: from the
 * fault itself where the program has it (vm_fault at fexit/filemap_map_pages,
 * the VMA at kprobe/handle_mm_fault on arm64), else the one the thread read
 * last while mm->mm_lock_seq is unchanged, else from the address space's
 * maple tree, read without a lock as lock_vma_under_rcu() reads it.
 *
 * Invariants: asked only during the fault at ta->fault_address, whose VMA
 * is locked (its per-VMA lock or the mmap lock): neither moved, unmapped
 * nor resized, so what is read of it is current. A maple walk reads each
 * node once, top down, as mtree_lookup_walk() does; BPF programs run under
 * rcu_read_lock(), so a node reached stays allocated, and a node replaced
 * meanwhile ("dead": its parent pointer is itself) sends the walk back to
 * the root, as the kernel's walkers do. The VMA kept is of the current
 * address space (vma_mm).
 */
#ifndef PAGETRACE_VMA_LOOKUP_BPF_H
#define PAGETRACE_VMA_LOOKUP_BPF_H

static __always_inline __u64 current_mm(void)
{
	return (__u64)BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), mm);
}

/* The page of the thread's VMA's file at @address. */
static __always_inline __u64 vma_page_index(const struct thread_access *ta, __u64 address)
{
	return ((address - ta->vma_start) >> page_shift) + ta->vma_pgoff;
}

static __always_inline bool vma_holds(const struct thread_access *ta, __u64 address)
{
	return address - ta->vma_start < ta->vma_end - ta->vma_start;
}

/* @vma, of address space @mm when its mm_lock_seq was @seq, as the thread's VMA. */
static __always_inline void keep_vma(struct thread_access *ta, struct vm_area_struct *vma,
				     __u64 mm, __u32 seq)
{
	ta->vma_mm = mm;
	ta->vma_seq = seq;
	ta->vma_start = BPF_CORE_READ(vma, vm_start);
	ta->vma_end = BPF_CORE_READ(vma, vm_end);
	ta->vma_pgoff = BPF_CORE_READ(vma, vm_pgoff);
	ta->vma_mapping = (__u64)BPF_CORE_READ(vma, vm_file, f_mapping);
}

/* include/linux/maple_tree.h: a node pointer's low byte holds its type; a node is 256 bytes. */
#define MAPLE_NODE_MASK		255UL
#define MAPLE_NODE_TYPE_SHIFT	3
#define MAPLE_NODE_TYPE_MASK	0xf
#define MAPLE_NODE_WORDS	32
#define MAPLE_MAX_PIVOTS	15
/*
 * Levels walked at most: 8 levels of half-full nodes (5 of an internal
 * node's 10 slots, 8 of a leaf's 16) hold over 600,000 VMAs; a process has
 * at most vm.max_map_count, 65,530 by default.
 */
#define MAPLE_WALK_LEVELS	8
/* maple_tree_entry()'s answer when a node was replaced under the walk. */
#define MAPLE_WALK_AGAIN	1
/* Walks from the root before giving up, as nodes keep being replaced under it. */
#define MAPLE_WALK_TRIES	4

/*
 * The entry that covers @address in the maple tree whose root entry is
 * @root (a VMA's address in mm->mm_mt); MAPLE_WALK_AGAIN if a node was
 * replaced under the walk (the kernel's walkers start again from the
 * root); else 0: empty, or deeper than MAPLE_WALK_LEVELS. Each node is read
 * whole, then its parent word again: a node marked dead meanwhile. A
 * global function: the verifier checks it once, not at each caller.
 */
__noinline __u64 maple_tree_entry(__u64 root, __u64 address)
{
	__u64 entry = root, node, parent = 0;
	__u32 zero = 0, type, n, pivots, slots, slot;
	struct xa_slots *buf = bpf_map_lookup_elem(&xa_slot_buf, &zero);

	/* The root is a node (mt_mk_root(): an xarray node entry), not one entry at 0. */
	if (!buf || !bpf_core_field_exists(struct mm_struct___maple, mm_mt) || !xa_entry_is_node(root))
		return 0;
	for (int level = 0; level < MAPLE_WALK_LEVELS; level++) {
		if (entry < 4096)
			return 0;	/* an empty slot, or a reserved entry */
		node = entry & ~MAPLE_NODE_MASK;
		type = (entry >> MAPLE_NODE_TYPE_SHIFT) & MAPLE_NODE_TYPE_MASK;
		if (type == bpf_core_enum_value(enum maple_type___pagetrace,
						maple_arange_64___pagetrace)) {
			n = bpf_core_field_size(struct maple_arange_64___pagetrace, pivot) / 8;
			pivots = bpf_core_field_offset(struct maple_arange_64___pagetrace, pivot) / 8;
			slots = bpf_core_field_offset(struct maple_arange_64___pagetrace, slot) / 8;
		} else if (type == bpf_core_enum_value(enum maple_type___pagetrace,
						       maple_range_64___pagetrace) ||
			   type == bpf_core_enum_value(enum maple_type___pagetrace,
						       maple_leaf_64___pagetrace)) {
			n = bpf_core_field_size(struct maple_range_64___pagetrace, pivot) / 8;
			pivots = bpf_core_field_offset(struct maple_range_64___pagetrace, pivot) / 8;
			slots = bpf_core_field_offset(struct maple_range_64___pagetrace, slot) / 8;
		} else {
			return 0;	/* a dense node: never in an mm's tree */
		}
		if (bpf_probe_read_kernel(buf->slot, MAPLE_NODE_WORDS * 8, (void *)node))
			return 0;
		/* The slot covering @address: the first whose pivot (its last address) is at or above it. */
		for (slot = 0; slot < MAPLE_MAX_PIVOTS && slot < n; slot++)
			if (buf->slot[(pivots + slot) & (MAPLE_NODE_WORDS - 1)] >= address)
				break;
		entry = buf->slot[(slots + slot) & (MAPLE_NODE_WORDS - 1)];
		bpf_probe_read_kernel(&parent, sizeof(parent), (void *)node);
		if ((buf->slot[0] & ~MAPLE_NODE_MASK) == node || (parent & ~MAPLE_NODE_MASK) == node)
			return MAPLE_WALK_AGAIN;	/* dead: replaced while the walk read it */
		if (type == bpf_core_enum_value(enum maple_type___pagetrace,
						maple_leaf_64___pagetrace))
			return entry;
	}
	return 0;
}

/* The VMA of the current address space holding @address, from its maple tree; or NULL. */
static __always_inline struct vm_area_struct *vma_from_maple_tree(__u64 mm, __u64 address)
{
	struct vm_area_struct *vma = NULL;

	if (!mm || !bpf_core_field_exists(struct mm_struct___maple, mm_mt))
		return NULL;
	for (int i = 0; i < MAPLE_WALK_TRIES; i++) {
		vma = (void *)maple_tree_entry(
			(__u64)BPF_CORE_READ((struct mm_struct___maple *)mm, mm_mt.ma_root), address);
		if ((__u64)vma != MAPLE_WALK_AGAIN)
			break;
	}
	if ((__u64)vma <= MAPLE_WALK_AGAIN || (__u64)BPF_CORE_READ(vma, vm_mm) != mm)
		return NULL;
	return vma;
}

/* @vma, the fault's own (locked), as the thread's VMA. */
static __always_inline void keep_fault_vma(struct thread_access *ta, struct vm_area_struct *vma)
{
	__u64 mm = current_mm();
	__u32 seq = 0;

	mm_lock_seq(mm, &seq);
	keep_vma(ta, vma, mm, seq);
}

/*
 * The VMA of the thread's fault, into ta->vma_*: the one kept, if it holds
 * the address and mm_lock_seq is what it was when the VMA was read (no
 * writer of the mmap lock has finished since; one still running cannot
 * have changed the VMA this fault holds locked, nor put another at the
 * address), else from the maple tree. False if neither answers (vma_mm is
 * then 0). Only during the fault.
 */
static __always_inline bool fault_vma(struct thread_access *ta)
{
	__u64 mm = current_mm(), address = ta->fault_address;
	struct vm_area_struct *vma;
	__u32 seq = 0;
	bool have_seq = mm_lock_seq(mm, &seq);

	if (have_seq && ta->vma_mm == mm && ta->vma_seq == seq && vma_holds(ta, address))
		return true;
	/* @seq is from before the walk: a writer finishing during it makes the VMA kept stale. */
	vma = vma_from_maple_tree(mm, address);
	ta->vma_mm = 0;
	if (!vma)
		return false;
	keep_vma(ta, vma, mm, seq);
	return vma_holds(ta, address);
}

#endif /* PAGETRACE_VMA_LOOKUP_BPF_H */
