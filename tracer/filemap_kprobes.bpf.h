/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The filemap fallbacks (programs.bpf.h, FILEMAP_FUNCTION_PROGRAMS) as
 * kprobes, for kernels that have kprobes but cannot attach fentry/fexit to
 * a kernel function (BPF trampolines need ftrace direct calls, which arm64
 * has from v6.4: Debian's arm64 6.1). User space loads these only where the
 * tracepoint is missing and fentry cannot attach (or PAGETRACE_ATTACH=kprobe
 * says so, a test knob), all three this way or none (attach_choice.h).
 *
 * filemap_fault() is seen at its start: a kprobe. filemap_get_pages() and
 * filemap_map_pages() are seen at their return, as fexit sees them, with
 * the arguments they were called with: the kprobe keeps them per thread and
 * function (filemap_calls), the kretprobe takes them back. Every thread's
 * calls are kept, traced or not: a call that starts before its thread is
 * traced and returns after is traced at its return, as with fexit (a
 * command's first fault-around, while the tool marks it traced, is such a
 * call: docs/lab/fault-path-cases.md, "arm64 6.1: a filemap call that starts before its thread is
 * traced"). Invariant: a thread's entry there is the call it is in. A
 * kretprobe can be missed (its instances, maxactive, all in use): the entry
 * is then left behind, and is counted lost, if its thread was traced, when
 * the thread calls the function again or exits; a traced thread's return
 * without its entry (the map full, or the kprobe's program not run) is
 * counted lost too. Never silently.
 */
#ifndef PAGETRACE_FILEMAP_KPROBES_BPF_H
#define PAGETRACE_FILEMAP_KPROBES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "thread_storage.bpf.h"
#include "sinks.bpf.h"
#include "traced_tasks.bpf.h"
#include "programs.bpf.h"

enum filemap_call { CALL_GET_PAGES, CALL_MAP_PAGES, NR_FILEMAP_CALLS };

struct filemap_call_key {
	__u32 tid;
	__u32 function;		/* enum filemap_call */
};

struct filemap_call_args {
	__u64 args[3];
	__u64 traced;		/* its thread was traced at the call */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);	/* calls in flight, all threads */
	__type(key, struct filemap_call_key);
	__type(value, struct filemap_call_args);
} filemap_calls SEC(".maps");

/* A thread calls @function with @args: kept for its return. */
static __always_inline void filemap_call_enters(enum filemap_call function, __u64 a0, __u64 a1,
						__u64 a2)
{
	struct filemap_call_key key = { current_thread_id(), function };
	struct filemap_call_args args = { { a0, a1, a2 }, current_is_traced() };
	struct filemap_call_args *missed = bpf_map_lookup_elem(&filemap_calls, &key);

	if (missed && (missed->traced || args.traced))
		on_fault_lost();	/* the last call's return was missed */
	if (bpf_map_update_elem(&filemap_calls, &key, &args, BPF_ANY) && args.traced)
		on_fault_lost();
}

/* The arguments of the call of @function returning now into @args, or false. */
static __always_inline bool filemap_call_returns(enum filemap_call function,
						 struct filemap_call_args *args)
{
	struct filemap_call_key key = { current_thread_id(), function };
	struct filemap_call_args *kept = bpf_map_lookup_elem(&filemap_calls, &key);
	bool traced = current_is_traced();

	if (kept)
		*args = *kept;
	if (kept)
		bpf_map_delete_elem(&filemap_calls, &key);
	else if (traced)
		on_fault_lost();
	return kept && traced;
}

/* sched_process_exit of thread @tid: a call still kept lost its return. */
static __always_inline void filemap_calls_exit(__u32 tid)
{
	for (__u32 f = 0; f < NR_FILEMAP_CALLS; f++) {
		struct filemap_call_key key = { tid, f };
		struct filemap_call_args *missed = bpf_map_lookup_elem(&filemap_calls, &key);

		if (missed && missed->traced)
			on_fault_lost();
		if (missed)
			bpf_map_delete_elem(&filemap_calls, &key);
	}
}

#define FILEMAP_KPROBE_PROGRAMS()							\
FILEMAP_FAULT_PROGRAM(kprobe_fault, "kprobe/filemap_fault", BPF_KPROBE)			\
SEC("kprobe/filemap_get_pages")								\
int BPF_KPROBE(kprobe_get_pages, struct kiocb *iocb, __u64 count_or_iter)		\
{											\
	filemap_call_enters(CALL_GET_PAGES, (__u64)iocb, count_or_iter, 0);		\
	return 0;									\
}											\
SEC("kretprobe/filemap_get_pages")							\
int BPF_KRETPROBE(kretprobe_get_pages, int ret)						\
{											\
	struct filemap_call_args a;							\
											\
	if (!filemap_call_returns(CALL_GET_PAGES, &a))					\
		return 0;								\
	return filemap_get_pages_done((struct kiocb *)a.args[0], a.args[1], ret);	\
}											\
SEC("kprobe/filemap_map_pages")								\
int BPF_KPROBE(kprobe_map_pages, struct vm_fault *vmf, unsigned long start,		\
	       unsigned long end)							\
{											\
	filemap_call_enters(CALL_MAP_PAGES, (__u64)vmf, start, end);			\
	return 0;									\
}											\
SEC("kretprobe/filemap_map_pages")							\
int BPF_KRETPROBE(kretprobe_map_pages)							\
{											\
	struct filemap_call_args a;							\
											\
	if (!filemap_call_returns(CALL_MAP_PAGES, &a))					\
		return 0;								\
	return filemap_map_pages_done((struct vm_fault *)a.args[0], a.args[1], a.args[2]);	\
}

#endif /* PAGETRACE_FILEMAP_KPROBES_BPF_H */
