/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Where a page fault starts, on architectures without the
 * exceptions:page_fault_user and page_fault_kernel tracepoints, which only
 * x86 has (arch/x86/include/asm/trace/exceptions.h, "x86, trace: Add page
 * fault tracepoints", Seiji Aguchi, v3.13). The tools look for the
 * tracepoint first, then for the function below in the kernel's BTF
 * (attach_choice.h, ATTACH_FAULT): never by architecture at run time.
 *
 * arm64: the fault handler, do_page_fault() (arch/arm64/mm/fault.c), can
 * be neither kprobed (__kprobes: on the kprobes blacklist) nor, on
 * Debian's 6.12, traced with fentry (not in available_filter_functions);
 * and fentry on any kernel function needs ftrace direct calls, which arm64
 * has from v6.4 ("arm64: ftrace: Add direct call support", Florent Revest):
 * Debian's 6.1 refuses it (ENOTSUPP). So a kprobe on handle_mm_fault(vma,
 * address, flags, regs), which do_page_fault() calls once the VMA is found,
 * before any filemap event of the fault: checked on Debian's arm64 6.1 and
 * 6.12 (docs/kernels.md, "arm64"). Only its calls from the arch handler
 * are faults in x86's sense: the others (get_user_pages(),
 * fixup_user_fault()) pass no registers. One exception may call it more
 * than once; x86's tracepoints fire once: the retries after VM_FAULT_RETRY
 * (FAULT_FLAG_TRIED), and the call under the mmap lock after one under the
 * VMA lock that could not finish (v6.4 "arm64/mm: try VMA lock-based page
 * fault handling first"), for the same address, are not new faults. One program per mode, each
 * attached in place of one of x86's two tracepoints (attach_choice.h, ATTACH_FAULT); the mode is
 * user_mode(regs).
 */
#ifndef PAGETRACE_ARCH_FAULTS_BPF_H
#define PAGETRACE_ARCH_FAULTS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "traced_tasks.bpf.h"
#include "fault_state.bpf.h"

#if defined(__TARGET_ARCH_arm64)
/*
 * user_mode(regs) (arch/arm64/include/asm/ptrace.h): the exception was
 * taken from EL0, PSR_MODE_MASK (0xf) of pstate being PSR_MODE_EL0t (0);
 * AArch32 tasks' EL0 has the same low bits.
 */
static __always_inline bool arm64_from_user(struct pt_regs *regs)
{
	return (BPF_CORE_READ(regs, pstate) & 0xf) == 0;
}

/*
 * Per thread: the address of its last handle_mm_fault() call under the VMA
 * lock (FAULT_FLAG_VMA_LOCK), or none. The call under the mmap lock that
 * follows one that could not finish there, for the same address, is the
 * same exception's (arch/arm64/mm/fault.c, do_page_fault(): lock_mmap);
 * after a filemap_fault() it finds the fault FAULT_RESOLVED, which x86's
 * page_access takes for the retry it is; a new fault there counts its
 * accesses twice (docs/lab/fault-path-cases.md, "arm64: the mmap-lock call after a VMA-lock
 * try").
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} vma_lock_tries SEC(".maps");

/* A new fault from the arch handler in mode @user (see above), or false. */
static __always_inline bool arch_fault_starts(__u64 address, unsigned int flags,
					      struct pt_regs *regs, bool user)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 *tried;

	if (!regs || arm64_from_user(regs) != user)
		return false;
	if (flags & bpf_core_enum_value(enum fault_flag, FAULT_FLAG_TRIED))
		return false;
	if (bpf_core_enum_value_exists(enum fault_flag, FAULT_FLAG_VMA_LOCK) &&
	    (flags & bpf_core_enum_value(enum fault_flag, FAULT_FLAG_VMA_LOCK))) {
		bpf_map_update_elem(&vma_lock_tries, &tid, &address, BPF_ANY);
		return true;
	}
	tried = bpf_map_lookup_elem(&vma_lock_tries, &tid);
	if (tried && *tried == address) {
		bpf_map_delete_elem(&vma_lock_tries, &tid);
		return false;
	}
	return true;
}

#define ARCH_FAULT_PROGRAM(name, user)						\
SEC("kprobe/handle_mm_fault")							\
int BPF_KPROBE(name, struct vm_area_struct *vma, unsigned long address,		\
	       unsigned int flags, struct pt_regs *regs)			\
{										\
	if (current_is_traced() && arch_fault_starts(address, flags, regs, user))	\
		page_access_fault_start(address, user);				\
	return 0;								\
}
#define ARCH_FAULT_PROGRAMS()							\
	ARCH_FAULT_PROGRAM(kprobe_fault_user, true)				\
	ARCH_FAULT_PROGRAM(kprobe_fault_kernel, false)
#else
#define ARCH_FAULT_PROGRAMS()
#endif

#endif /* PAGETRACE_ARCH_FAULTS_BPF_H */
