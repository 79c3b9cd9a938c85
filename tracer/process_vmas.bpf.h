/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Of the page-access engine (page_access.bpf.h): the file VMAs that a
 * process's mmap calls made, any thread's, for a fault whose VMA lookup
 * finds the mmap lock busy in a thread that made no such call itself
 * (fault_vma(); the thread's own last VMA is tried first). Browsers fault
 * so: a thread's first fault in a library another thread mapped, while
 * other threads map and unmap (tests/test_trace_used.py, mmap-contend
 * --threads; docs/fault-path.md).
 *
 * A lookup that succeeds records its VMA too (process_vma_found()): exec
 * maps the executable and its interpreter with no mmap call.
 *
 * Invariants: a process's record is of one address space (mm): a record of
 * another (after an exec) is never read, and the next mmap starts it anew.
 * A VMA is kept as asked for, as page_access_syscall_ends() keeps the
 * thread's: a merge or a split keeps each page where it was, and a later
 * mapping over it is a later record, read first. A fork's child starts
 * with its parent's records, as its address space does. A slot is read
 * only when its sequence count is even and the same before and after.
 */
#ifndef PAGETRACE_PROCESS_VMAS_BPF_H
#define PAGETRACE_PROCESS_VMAS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define PROCESS_VMAS	32	/* a power of two */

struct file_vma {
	__u64 mapping, start, end, pgoff;
};

struct process_vmas {
	__u64 mm;		/* the address space the records are of */
	__u64 next;		/* the slot of the next record */
	__u64 seq[PROCESS_VMAS];	/* odd while the slot is written */
	struct file_vma vma[PROCESS_VMAS];
};

/* By process (tgid); least recently used dropped, never refused. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct process_vmas);
} process_vmas SEC(".maps");

static const struct process_vmas no_process_vmas;

static __always_inline __u64 current_mm(void)
{
	return (__u64)BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), mm);
}

/* The current process's records of address space @mm, made when @create. */
static __always_inline struct process_vmas *process_vmas_of(__u64 mm, bool create)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct process_vmas *pv = bpf_map_lookup_elem(&process_vmas, &tgid);

	if (!pv && create) {
		bpf_map_update_elem(&process_vmas, &tgid, &no_process_vmas, BPF_NOEXIST);
		pv = bpf_map_lookup_elem(&process_vmas, &tgid);
	}
	if (pv && pv->mm != mm) {
		if (!create)
			return NULL;
		pv->mm = mm;	/* an exec: the old records are of another address space */
		for (__u32 i = 0; i < PROCESS_VMAS; i++)
			pv->vma[i].mapping = 0;
	}
	return pv;
}

/* A file VMA [start, end) of @mapping from page @pgoff: the process's next record. */
static __always_inline void process_vma_record(__u64 mapping, __u64 start, __u64 end, __u64 pgoff)
{
	struct process_vmas *pv = process_vmas_of(current_mm(), true);
	__u32 slot;

	if (!pv)
		return;
	slot = __sync_fetch_and_add(&pv->next, 1) & (PROCESS_VMAS - 1);
	__sync_fetch_and_add(&pv->seq[slot], 1);
	pv->vma[slot].mapping = mapping;
	pv->vma[slot].start = start;
	pv->vma[slot].end = end;
	pv->vma[slot].pgoff = pgoff;
	__sync_fetch_and_add(&pv->seq[slot], 1);
}

/*
 * A file VMA that a lookup found, for the process's other threads: the
 * executable's and the interpreter's, which exec maps with no mmap call, and
 * those mapped before tracing began. Recorded unless a record has it. In a
 * frame of its own, off the chain of the walk's frames. Called by
 * fault_around.bpf.h: unused where this header is built alone.
 */
static __noinline __attribute__((unused))
void process_vma_found(__u64 mapping, __u64 start, __u64 end, __u64 pgoff)
{
	struct process_vmas *pv = process_vmas_of(current_mm(), false);

	for (__u32 i = 0; pv && i < PROCESS_VMAS; i++)
		if (pv->vma[i].start == start && pv->vma[i].mapping == mapping &&
		    pv->vma[i].end == end && pv->vma[i].pgoff == pgoff)
			return;
	process_vma_record(mapping, start, end, pgoff);
}

/*
 * The latest record of the current process holding @address: its VMA into
 * *@mapping, *@start, *@end and *@pgoff (the caller's, off the stack's
 * copies). False, with all four 0, if none.
 */
static __always_inline bool process_vma_find(__u64 address, __u64 *mapping, __u64 *start,
					     __u64 *end, __u64 *pgoff)
{
	struct process_vmas *pv = process_vmas_of(current_mm(), false);

	/* pv->next read at each step: fewer verifier states than a copy kept across the loop. */
	for (__u32 i = 1; pv && i <= PROCESS_VMAS; i++) {
		__u32 slot = (pv->next - i) & (PROCESS_VMAS - 1);
		__u64 seq = __sync_fetch_and_add(&pv->seq[slot], 0);

		*mapping = pv->vma[slot].mapping;
		*start = pv->vma[slot].start;
		*end = pv->vma[slot].end;
		*pgoff = pv->vma[slot].pgoff;
		if (!(seq & 1) && __sync_fetch_and_add(&pv->seq[slot], 0) == seq && *mapping &&
		    address - *start < *end - *start)
			return true;
	}
	*mapping = *start = *end = *pgoff = 0;
	return false;
}

/* sched_process_fork: a new process starts with its parent's records. */
static __always_inline void process_vmas_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 parent_tgid = BPF_CORE_READ(parent, tgid), child_tgid = BPF_CORE_READ(child, tgid);
	struct process_vmas *pv;

	if (parent_tgid == child_tgid)
		return;		/* a thread: the same address space */
	pv = bpf_map_lookup_elem(&process_vmas, &parent_tgid);
	if (!pv || pv->mm != (__u64)BPF_CORE_READ(parent, mm))
		return;
	if (bpf_map_update_elem(&process_vmas, &child_tgid, pv, BPF_ANY))
		return;
	pv = bpf_map_lookup_elem(&process_vmas, &child_tgid);
	if (pv)
		pv->mm = (__u64)BPF_CORE_READ(child, mm);
}

#endif /* PAGETRACE_PROCESS_VMAS_BPF_H */
