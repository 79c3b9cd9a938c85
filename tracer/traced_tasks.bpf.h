/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which threads are traced: every thread (trace_all), or those in
 * traced_tids, which user space seeds (a command it starts, a process it
 * adopts) and sched_process_fork/exit keep up to date. Shared by trace and
 * cachetop. The includer defines on_task_lost() (traced_tids full) before
 * including this header.
 */
#ifndef PAGETRACE_TRACED_TASKS_BPF_H
#define PAGETRACE_TRACED_TASKS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

const volatile bool trace_all = false;
const volatile bool follow_children = true;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);		/* tid */
	__type(value, __u8);
} traced_tids SEC(".maps");

static __always_inline __u32 current_tid(void)
{
	return (__u32)bpf_get_current_pid_tgid();
}

static __always_inline bool current_is_traced(void)
{
	__u32 tid;

	if (trace_all)
		return true;
	tid = current_tid();
	return bpf_map_lookup_elem(&traced_tids, &tid) != NULL;
}

/* sched_process_fork: a traced thread's child is traced. */
static __always_inline void follow_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 parent_tid = BPF_CORE_READ(parent, pid);
	__u32 child_tid = BPF_CORE_READ(child, pid);
	__u8 one = 1;

	if (trace_all || !bpf_map_lookup_elem(&traced_tids, &parent_tid))
		return;
	/* --no-children still follows the process's own new threads. */
	if (!follow_children &&
	    BPF_CORE_READ(child, tgid) != BPF_CORE_READ(parent, tgid))
		return;
	if (bpf_map_update_elem(&traced_tids, &child_tid, &one, BPF_ANY))
		on_task_lost();
}

/* sched_process_exit */
static __always_inline void forget_task(__u32 tid)
{
	bpf_map_delete_elem(&traced_tids, &tid);
}

#endif /* PAGETRACE_TRACED_TASKS_BPF_H */
