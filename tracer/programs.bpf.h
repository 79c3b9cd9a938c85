/* SPDX-License-Identifier: GPL-2.0 */
/*
 * How the tracer tools define their programs: each tracepoint program twice,
 * from one line (TRACEPOINT_PROGRAMS), and the programs that trace --used
 * and the cache tools share: fault-around and the start of read system
 * calls (PAGE_ACCESS_PROGRAMS). The filemap functions' programs hand their
 * events to the tool's handle_get_pages() and handle_fault() (sinks.bpf.h).
 */
#ifndef PAGETRACE_PROGRAMS_BPF_H
#define PAGETRACE_PROGRAMS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "page_math.bpf.h"
#include "sinks.bpf.h"
#include "traced_tasks.bpf.h"
#include "page_access.bpf.h"

/*
 * Every program twice, from one line: as tp_btf (typed arguments, preferred)
 * and as raw_tp (for kernels that refuse tp_btf). User space loads one set.
 */
#define TRACEPOINT_PROGRAMS(name, tracepoint, body, ...)			\
	SEC("tp_btf/" tracepoint)						\
	int BPF_PROG(btf_##name, __VA_ARGS__) { return body; }			\
	SEC("raw_tp/" tracepoint)						\
	int BPF_PROG(raw_##name, __VA_ARGS__) { return body; }

/* @vmf: the fault's, where the program has it (fexit), else NULL. */
static __always_inline int handle_map_pages(struct address_space *mapping, __u64 start, __u64 end,
					    struct vm_fault *vmf)
{
	if (current_is_traced())
		page_access_map(mapping, start, end, vmf);
	return 0;
}

static __always_inline int handle_page_fault(unsigned long address, bool user_mode)
{
	if (current_is_traced())
		page_access_fault_start(address, user_mode);
	return 0;
}

/*
 * A traced thread's system call: its last fault has ended (a silent one is
 * resolved, page_access_syscall_starts()); then the read family is looked
 * at.
 */
static __always_inline int handle_sys_enter(struct pt_regs *regs, long id)
{
	if (!current_is_traced())
		return 0;
	page_access_syscall_starts(id);
	if (is_read_syscall(id))
		page_access_read_syscall(regs, id);
	return 0;
}

/*
 * Which page faulted (page_fault_*), what fault-around mapped (map_pages),
 * and where a system call starts (sys_enter): the last fault has ended, a
 * read call starts, or a call that may map a file.
 *
 * Where a thread enters the kernel, x86's exceptions:page_fault_user and
 * page_fault_kernel and raw_syscalls:sys_enter, has one program,
 * raw_kern_entry, raw_tp in tp_btf loads too: a tp_btf program is bound
 * to one tracepoint when it is loaded, a raw_tp program attaches to any
 * number, and the verifier checks the fault path's global functions, which
 * both ends call (resolve_silent(), map_fault_folio(), walk_chunk()), once
 * for it where two programs had them checked twice. Its section names no
 * tracepoint, so libbpf attaches it to none; the loader attaches it to each
 * row that chose it (attach_choice.h, ATTACH_ENTRY).
 *
 * Which tracepoint fired is told by the second argument: a fault's is its
 * pt_regs, a kernel address, negative as a long; sys_enter's is the
 * system call's number, from 0 up. A number below 0 (syscall(-1), or a
 * tracer's skipped call) is taken for a fault at a kernel address, which
 * resolves to no VMA and so counts nothing, as its call, no read nor map,
 * counted nothing either; the fault before it is resolved all the same.
 * The mode is x86's user_mode(regs), the test by which
 * trace_page_fault_entries() fires one tracepoint or the other.
 */
#define PAGE_ACCESS_PROGRAMS()							\
	TRACEPOINT_PROGRAMS(map_pages, "mm_filemap_map_pages",				\
			    handle_map_pages(mapping, start, end, NULL),		\
			    struct address_space *mapping, unsigned long start,		\
			    unsigned long end)						\
	SEC("raw_tp")									\
	int BPF_PROG(raw_kern_entry, __u64 first, __u64 second)			\
	{										\
		if ((long)second >= 0)	/* sys_enter(regs, id) */			\
			return handle_sys_enter((struct pt_regs *)first, (long)second);	\
		/* page_fault_user/kernel(address, regs, error_code), x86's alone */	\
		if (!bpf_core_field_exists(struct pt_regs___x86, cs))			\
			return 0;	/* arm64: attached to sys_enter only */		\
		return handle_page_fault(first, x86_user_mode((struct pt_regs *)second));	\
	}


/* Argument @n of the function a fentry or fexit program is on, as a number. */
static __always_inline unsigned long func_arg(void *ctx, __u32 n)
{
	__u64 value = 0;

	bpf_get_func_arg(ctx, n, &value);
	return value;
}

/*
 * sys_enter beside the PTE hooks: no fault to end there, only a read
 * call's start (page_access_read_syscall()).
 */
static __always_inline int handle_read_entry(struct pt_regs *regs, long id)
{
	if (is_read_syscall(id) && current_is_traced())
		page_access_read_syscall(regs, id);
	return 0;
}

/*
 * Where the kernel sets page-table entries (pte_hooks.bpf.h), with fentry
 * and fexit, loaded instead of fault-around's and the fault tracepoints'
 * programs where they attach: set_pte_range() ("mm: convert do_set_pte()
 * to set_pte_range()", 3bd786f76de2, v6.5), or do_set_pte() before it;
 * and do_set_pmd(), which maps a PMD-sized folio whole when it returns 0.
 * Its second argument is a page of that folio (its head, once it is
 * checked), or since "mm: convert do_set_pmd() to take a folio" the folio
 * itself: either way the folio is found from it. sys_enter goes with them
 * (handle_read_entry()).
 */
#define PTE_HOOK_PROGRAMS()							\
TRACEPOINT_PROGRAMS(read_entry, "sys_enter", handle_read_entry(regs, id),	\
		    struct pt_regs *regs, long id)				\
SEC("fentry/set_pte_range")							\
int BPF_PROG(fentry_pte_range, struct vm_fault *vmf, struct folio *folio,		\
	     struct page *page, unsigned int nr)					\
{										\
	if (current_is_traced())						\
		page_access_ptes_set(vmf, func_arg(ctx, 1), func_arg(ctx, 2), nr); \
	return 0;								\
}										\
SEC("fentry/do_set_pte")							\
int BPF_PROG(fentry_set_pte, struct vm_fault *vmf)				\
{										\
	unsigned long page;							\
										\
	if (!current_is_traced())						\
		return 0;							\
	page = func_arg(ctx, 1);						\
	page_access_ptes_set(vmf, folio_of_page(page), page, 1);		\
	return 0;								\
}										\
SEC("fexit/do_set_pmd")								\
int BPF_PROG(fexit_set_pmd, struct vm_fault *vmf)				\
{										\
	unsigned long folio;							\
	__u64 ret = -1;								\
										\
	bpf_get_func_ret(ctx, &ret);						\
	if ((vm_fault_t)ret || !current_is_traced())				\
		return 0;							\
	folio = folio_of_page(func_arg(ctx, 1));				\
	page_access_ptes_set(vmf, folio, folio, folio_pages((struct folio *)folio)); \
	return 0;								\
}

/*
 * Kernels before the filemap: get_pages, map_pages and fault tracepoints
 * (v6.12, "filemap: add trace events for get_pages, map_pages, and
 * fault", Takaya Saeki, 2024) get the same three events from the functions
 * that fire them (mm/filemap.c), with fentry and fexit (v5.5). User space
 * loads these only where the tracepoint is missing and the function is in
 * BTF, and reads the arguments the tracepoint would have given:
 *   mm_filemap_get_pages(mapping, index, last_index - 1), where
 *     filemap_get_pages() succeeds (fexit, ret 0);
 *   mm_filemap_fault(mapping, vmf->pgoff), at filemap_fault()'s start,
 *     unless the page lies beyond the end of the file (SIGBUS);
 *   mm_filemap_map_pages(mapping, start, end), end clamped to the file.
 */

/*
 * filemap_get_pages(iocb, iter, fbatch) took the iov_iter until v6.5
 * "splice: Add a func to do a splice from a buffered file without
 * ITER_PIPE" (David Howells, 2023) made it (iocb, count, fbatch,
 * need_uptodate). User space reads which from the function's BTF.
 */
const volatile bool get_pages_takes_count = true;

static __always_inline struct address_space *vmf_mapping(struct vm_fault *vmf)
{
	return BPF_CORE_READ(vmf, vma, vm_file, f_mapping);
}

/* The last page of @mapping's file, or -1 for an empty file. */
static __always_inline __s64 last_file_page(struct address_space *mapping)
{
	__s64 size = BPF_CORE_READ(mapping, host, i_size);

	return size > 0 ? (__s64)((__u64)(size - 1) >> page_shift) : -1;
}

/* filemap_get_pages(iocb, count_or_iter, ...) has returned @ret. */
static __always_inline int filemap_get_pages_done(struct kiocb *iocb, __u64 count_or_iter, int ret)
{
	__u64 pos, count;

	if (ret)
		return 0;
	pos = BPF_CORE_READ(iocb, ki_pos);
	count = get_pages_takes_count ? count_or_iter :
		BPF_CORE_READ((struct iov_iter *)count_or_iter, count);
	return handle_get_pages(BPF_CORE_READ(iocb, ki_filp, f_mapping), pos >> page_shift,
				((pos + count + (1ULL << page_shift) - 1) >> page_shift) - 1);
}

/* filemap_fault(vmf) starts. */
static __always_inline int filemap_fault_starts(struct vm_fault *vmf)
{
	struct address_space *mapping = vmf_mapping(vmf);
	__u64 index = BPF_CORE_READ(vmf, pgoff);

	if (!mapping || (__s64)index > last_file_page(mapping))
		return 0;
	return handle_fault(mapping, index);
}

/* filemap_map_pages(vmf, start, end) has returned. */
static __always_inline int filemap_map_pages_done(struct vm_fault *vmf, __u64 start, __u64 end)
{
	struct address_space *mapping = vmf_mapping(vmf);
	__s64 last = mapping ? last_file_page(mapping) : -1;

	if (last < 0 || start > (__u64)last)
		return 0;
	return handle_map_pages(mapping, start, end > (__u64)last ? (__u64)last : end, vmf);
}

/*
 * filemap_fault() at its start, as fentry or as kprobe (filemap_kprobes.bpf.h):
 * @prog is BPF_PROG or BPF_KPROBE, which read the argument each its way.
 */
#define FILEMAP_FAULT_PROGRAM(name, section, prog)				\
SEC(section)									\
int prog(name, struct vm_fault *vmf)						\
{										\
	return filemap_fault_starts(vmf);					\
}

#define FILEMAP_FUNCTION_PROGRAMS()							\
SEC("fexit/filemap_get_pages")							\
int BPF_PROG(fexit_get_pages, struct kiocb *iocb, __u64 count_or_iter)		\
{										\
	__u64 ret = 0;								\
										\
	bpf_get_func_ret(ctx, &ret);						\
	return filemap_get_pages_done(iocb, count_or_iter, (int)ret);		\
}										\
FILEMAP_FAULT_PROGRAM(fentry_fault, "fentry/filemap_fault", BPF_PROG)		\
SEC("fexit/filemap_map_pages")							\
int BPF_PROG(fexit_map_pages, struct vm_fault *vmf, unsigned long start,	\
	     unsigned long end)							\
{										\
	return filemap_map_pages_done(vmf, start, end);				\
}

#endif /* PAGETRACE_PROGRAMS_BPF_H */
