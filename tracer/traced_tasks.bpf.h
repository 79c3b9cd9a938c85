/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which threads are traced: every thread (trace_all), those of one cgroup
 * and its descendants (trace_cgroup, checked at every event, so that a task
 * is traced from the moment it joins until it leaves), or those in
 * traced_tids, which user space seeds (a command it starts, a process it
 * adopts) and sched_process_fork/exit keep up to date. Shared by trace and
 * cachetop. It tells the sinks on_task_lost() (traced_tids full) and
 * on_thread_traced() (a thread seen traced for the first time).
 *
 * A traced thread also gets task-local storage (thread_states) at its first
 * event, where trace keeps its read context (why its next read happens).
 * From then on the hot paths (a fault, a bio) find both "is it traced?" and
 * "what was it doing?" without hashing: thread_states holds entries only for
 * traced threads, and they go with their thread.
 */
#ifndef PAGETRACE_TRACED_TASKS_BPF_H
#define PAGETRACE_TRACED_TASKS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "thread_storage.bpf.h"
#include "sinks.bpf.h"

/* Per-thread memory of the last readahead/fault trigger, for "cause". */
struct read_context {
	__u64 inode;
	__u32 cause;
	__u32 armed;
};

const volatile bool trace_all = false;
const volatile bool follow_children = true;
/* --cgroup (lib/cgroup.c resolves it): the cgroup's id and depth, and its
 * hierarchy: a v1 controller's id (enum cgroup_subsys_id), or -1 for v2.
 * Written by user space after loading too (--container --wait: the cgroup
 * appears once trace runs); id 0, none yet, matches no task. */
const volatile bool trace_cgroup = false;
__u64 target_cgroup_id = 0;
__u32 target_cgroup_level = 0;
__s32 target_cgroup_subsys = -1;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);		/* tid */
	__type(value, __u8);
} traced_tids SEC(".maps");

THREAD_STORAGE_MAP(thread_states, struct read_context);
static const struct read_context no_read_context;

/* Is @task in the --cgroup cgroup, or below it? */
static __noinline bool in_target_cgroup(struct task_struct *task)
{
	struct css_set *cgroups = BPF_CORE_READ(task, cgroups);
	struct cgroup_subsys_state *css = NULL;
	struct cgroup *cgrp;
	__s32 id = target_cgroup_subsys;
	__u64 target = target_cgroup_id;

	if (!cgroups || !target)
		return false;
	if (id < 0) {
		cgrp = BPF_CORE_READ(cgroups, dfl_cgrp);
	} else {
		/* As io_css_of() (trace.bpf.c): the array's length from the BTF. */
		if (id >= bpf_core_field_size(cgroups->subsys) / sizeof(cgroups->subsys[0]))
			return false;
		bpf_core_read(&css, sizeof(css), &cgroups->subsys[id]);
		cgrp = BPF_CORE_READ(css, cgroup);
	}
	return cgroup_ancestor_id(cgrp, target_cgroup_level) == target;
}

/*
 * The current thread's state if it is traced, else NULL. With trace_all,
 * NULL can also mean that its storage could not be made: callers test
 * trace_all || state.
 */
static __always_inline struct read_context *traced_thread(void)
{
	struct read_context *state;
	__u32 tid;

	if (trace_cgroup && !in_target_cgroup(current_task()))
		return NULL;
	state = thread_storage_get(&thread_states, &no_read_context, false);
	if (state)
		return state;
	tid = current_thread_id();	/* thread_storage.bpf.h */
	if (!trace_all && !trace_cgroup && !bpf_map_lookup_elem(&traced_tids, &tid))
		return NULL;
	on_thread_traced(current_task());
	return thread_storage_get(&thread_states, &no_read_context, true);
}

static __always_inline bool current_is_traced(void)
{
	return traced_thread() != NULL || trace_all;
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
	on_thread_traced(child);
}

/* sched_process_exit */
static __always_inline void forget_task(__u32 tid)
{
	bpf_map_delete_elem(&traced_tids, &tid);
	thread_storage_forget(&thread_states, tid);
}

#endif /* PAGETRACE_TRACED_TASKS_BPF_H */
