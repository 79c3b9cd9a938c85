/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-thread state for the tracer tools: task-local storage where the
 * kernel has it, else a hash map keyed by thread id.
 *
 * Task storage (v5.11 "bpf: Implement task local storage", KP Singh, 2020;
 * usable from tracing programs since) needs no hashing on the hot paths and
 * goes with its task. Older kernels reject the map type, so user space
 * probes for it (lib: thread_storage_fallback()) and, where it is missing,
 * makes each such map a hash map of thread ids and clears use_task_storage;
 * the verifier then drops the task-storage branch, whose helpers
 * (bpf_task_storage_get, bpf_get_current_task_btf) such kernels lack too.
 * The hash entries are deleted at sched_process_exit (thread_storage_forget).
 */
#ifndef PAGETRACE_THREAD_STORAGE_BPF_H
#define PAGETRACE_THREAD_STORAGE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

const volatile bool use_task_storage = true;

/* A per-thread map: task storage, or (user space's choice) a hash of tids. */
#define THREAD_STORAGE_MAP(name, value_type)				\
	struct {							\
		__uint(type, BPF_MAP_TYPE_TASK_STORAGE);		\
		__uint(map_flags, BPF_F_NO_PREALLOC);			\
		__type(key, int);					\
		__type(value, value_type);				\
	} name SEC(".maps")

static __always_inline __u32 current_thread_id(void)
{
	return (__u32)bpf_get_current_pid_tgid();
}

/*
 * The current thread's entry of @map, made (zeroed from @zero, a value of
 * the map's type) when @create and it has none; NULL when it has none, or
 * the map is full.
 */
static __always_inline void *thread_storage_get(void *map, const void *zero, bool create)
{
	__u32 tid;
	void *value;

	if (use_task_storage)
		return bpf_task_storage_get(map, bpf_get_current_task_btf(), NULL,
					    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	tid = current_thread_id();
	value = bpf_map_lookup_elem(map, &tid);
	if (value || !create)
		return value;
	bpf_map_update_elem(map, &tid, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &tid);
}

/* sched_process_exit: a hash entry does not go with its task by itself. */
static __always_inline void thread_storage_forget(void *map, __u32 tid)
{
	if (!use_task_storage)
		bpf_map_delete_elem(map, &tid);
}

/* The current task, for helpers that take one (probe-read fields only). */
static __always_inline struct task_struct *current_task(void)
{
	if (use_task_storage)
		return bpf_get_current_task_btf();
	return (struct task_struct *)bpf_get_current_task();
}

#endif /* PAGETRACE_THREAD_STORAGE_BPF_H */
