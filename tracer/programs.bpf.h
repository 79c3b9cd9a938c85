/* SPDX-License-Identifier: GPL-2.0 */
/*
 * How the tracer tools define their programs: each tracepoint program twice,
 * from one line (TRACEPOINT_PROGRAMS), and the programs that trace --used
 * and the cache tools share: fault-around and the start of read system
 * calls (PAGE_ACCESS_PROGRAMS, to be used after traced_tasks.bpf.h and
 * page_access.bpf.h are included).
 */
#ifndef PAGETRACE_PROGRAMS_BPF_H
#define PAGETRACE_PROGRAMS_BPF_H

#include <bpf/bpf_tracing.h>

/*
 * Every program twice, from one line: as tp_btf (typed arguments, preferred)
 * and as raw_tp (for kernels that refuse tp_btf). User space loads one set.
 */
#define TRACEPOINT_PROGRAMS(name, tracepoint, body, ...)			\
	SEC("tp_btf/" tracepoint)						\
	int BPF_PROG(btf_##name, __VA_ARGS__) { return body; }			\
	SEC("raw_tp/" tracepoint)						\
	int BPF_PROG(raw_##name, __VA_ARGS__) { return body; }

static __always_inline int handle_map_pages(struct address_space *mapping, __u64 start, __u64 end)
{
	if (current_is_traced())
		page_access_map(mapping, start, end);
	return 0;
}

static __always_inline int handle_page_fault(unsigned long address)
{
	if (current_is_traced())
		page_access_fault_start(address);
	return 0;
}

/* Only the read family is looked at; every other system call returns here. */
static __always_inline int handle_sys_enter(struct pt_regs *regs, long id)
{
	if (is_read_syscall(id) && current_is_traced())
		page_access_read_syscall(regs, id);
	return 0;
}

/*
 * Which page faulted (page_fault_*), what fault-around mapped (map_pages),
 * and where a read system call starts (sys_enter).
 */
#define PAGE_ACCESS_PROGRAMS()							\
	TRACEPOINT_PROGRAMS(map_pages, "mm_filemap_map_pages",				\
			    handle_map_pages(mapping, start, end),			\
			    struct address_space *mapping, unsigned long start,		\
			    unsigned long end)						\
	TRACEPOINT_PROGRAMS(fault_user, "page_fault_user", handle_page_fault(address),	\
			    unsigned long address, struct pt_regs *regs,		\
			    unsigned long error_code)					\
	TRACEPOINT_PROGRAMS(fault_kernel, "page_fault_kernel",				\
			    handle_page_fault(address), unsigned long address,		\
			    struct pt_regs *regs, unsigned long error_code)		\
	TRACEPOINT_PROGRAMS(read_syscall, "sys_enter", handle_sys_enter(regs, id),	\
			    struct pt_regs *regs, long id)

#endif /* PAGETRACE_PROGRAMS_BPF_H */
