/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which program each attach point of trace, cachestat and cachetop loads on
 * the running kernel, decided from its BTF at run time, never from its
 * version: the tracepoint as tp_btf (or raw_tp, when tp_btf is refused); its
 * older form, where the tracepoint once took one more leading argument; or,
 * for a kernel without the tracepoint, fentry/fexit on the function that
 * fires it in newer kernels. Also the per-thread maps' fallback for kernels
 * without task storage (thread_storage.bpf.h).
 */
#ifndef PAGETRACE_ATTACH_CHOICE_H
#define PAGETRACE_ATTACH_CHOICE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

struct bpf_object;
struct bpf_program;
struct btf;

struct attach_choice {
	const char *tracepoint;	/* e.g. "block_bio_queue" */
	const char *group;	/* its tracefs group, for messages */
	struct bpf_program *btf_prog, *raw_prog;
	/*
	 * The older form of the tracepoint, or NULL; told apart by its number
	 * of prototype parameters (the tracepoint's void *__data included).
	 */
	struct bpf_program *older_btf_prog, *older_raw_prog;
	int older_params;
	/* fentry/fexit on @function where the kernel lacks the tracepoint; or NULL. */
	const char *function;
	/* If not 0: the only number of parameters of @function its program reads right. */
	int function_params;
	int function_id;	/* its BTF id, or -1 (attach_choice_resolve) */
	struct bpf_program *function_prog;
	/*
	 * The same as a kprobe (and a kretprobe where it is fexit), where
	 * fentry cannot attach (attach_choice_functions); or NULL.
	 */
	struct bpf_program *kprobe_prog, *kretprobe_prog;
	/* Out (attach_choice_find): how it attaches here, NULL if it cannot. */
	const char *how;
	struct bpf_program *chosen, *chosen_return;
};

/*
 * Table rows: a tracepoint's tp_btf and raw_tp programs (btf_NAME, raw_NAME
 * in the skeleton's progs @p); the older block_bio_queue's; a function
 * fallback.
 */
#define ATTACH_TRACEPOINT(p, tp, grp, name) \
	{ .tracepoint = tp, .group = grp, .btf_prog = (p)->btf_##name, .raw_prog = (p)->raw_##name }
#define ATTACH_BIO_QUEUE(p) \
	{ .tracepoint = "block_bio_queue", .group = "block", .btf_prog = (p)->btf_bio_queue, \
	  .raw_prog = (p)->raw_bio_queue, .older_btf_prog = (p)->btf_bio_queue_after_queue, \
	  .older_raw_prog = (p)->raw_bio_queue_after_queue, .older_params = 3 }
#define ATTACH_OR_FUNCTION(p, tp, grp, name, fn, fn_prog) \
	{ .tracepoint = tp, .group = grp, .btf_prog = (p)->btf_##name, .raw_prog = (p)->raw_##name, \
	  .function = fn, .function_prog = (p)->fn_prog }
/* A filemap fallback (filemap_kprobes.bpf.h): kprobe_NAME, and the kretprobe @krp or NULL. */
#define ATTACH_FILEMAP(p, tp, name, fn, fn_prog, krp) \
	{ .tracepoint = tp, .group = "filemap", .btf_prog = (p)->btf_##name, \
	  .raw_prog = (p)->raw_##name, .function = fn, .function_prog = (p)->fn_prog, \
	  .kprobe_prog = (p)->kprobe_##name, .kretprobe_prog = krp }
/* The rows trace and the cache tools share, in this order (programs.bpf.h). */
#define ATTACH_BIO_AND_TASKS(p) \
	ATTACH_BIO_QUEUE(p), \
	ATTACH_TRACEPOINT(p, "sched_process_fork", "sched", fork), \
	ATTACH_TRACEPOINT(p, "sched_process_exit", "sched", exit)
#define ATTACH_READS_AND_FAULTS(p) \
	ATTACH_FILEMAP(p, "mm_filemap_fault", fault, "filemap_fault", fentry_fault, NULL), \
	ATTACH_FILEMAP(p, "mm_filemap_get_pages", get_pages, "filemap_get_pages", fexit_get_pages, \
		       (p)->kretprobe_get_pages)
/*
 * A kernel function without a tracepoint (its name stands for one in
 * messages): fentry/fexit only, where it attaches (attach_choice_functions).
 */
#define ATTACH_FUNCTION(p, fn, params, fn_prog) \
	{ .tracepoint = fn, .group = "function", .function = fn, .function_params = params, \
	  .function_prog = (p)->fn_prog }
/*
 * Where a thread enters the kernel: x86's fault tracepoints and sys_enter,
 * one raw_tp program, raw_kern_entry, for all three rows, in tp_btf loads
 * too (programs.bpf.h), which the loader attaches to each
 * (attach_choice_by_loader). On arm64, where the fault tracepoints are
 * missing, a kprobe kprobe_NAME on handle_mm_fault() (arch_faults.bpf.h).
 */
#define ATTACH_ENTRY(p, tp, grp) \
	{ .tracepoint = tp, .group = grp, .raw_prog = (p)->raw_kern_entry }
#if defined(__aarch64__)
#define ATTACH_FAULT(p, tp, name) \
	{ .tracepoint = tp, .group = "exceptions", .raw_prog = (p)->raw_kern_entry, \
	  .function = "handle_mm_fault", .function_prog = (p)->kprobe_##name }
#else
#define ATTACH_FAULT(p, tp, name) ATTACH_ENTRY(p, tp, "exceptions")
#endif
#define ATTACH_PAGE_ACCESS(p) \
	ATTACH_FILEMAP(p, "mm_filemap_map_pages", map_pages, "filemap_map_pages", fexit_map_pages, \
		       (p)->kretprobe_map_pages), \
	ATTACH_FAULT(p, "page_fault_user", fault_user), \
	ATTACH_FAULT(p, "page_fault_kernel", fault_kernel), \
	ATTACH_ENTRY(p, "sys_enter", "raw_syscalls")

/*
 * Find how @c attaches on the kernel described by @vmlinux (sets how,
 * chosen): a row without a tp_btf program takes its raw_tp one in tp_btf
 * loads too.
 */
void attach_choice_find(struct attach_choice *c, const struct btf *vmlinux, bool use_btf);
/* The BTF ids of @c's @n rows' functions, in one pass over the kernel's types: before _find. */
void attach_choice_resolve(struct attach_choice *c, int n, const struct btf *vmlinux);
/*
 * The function fallbacks chosen among @c's @n rows, all as kprobes or none
 * (never half of each): kprobes where fentry cannot attach to one of their
 * functions and the kernel has kprobes, or where PAGETRACE_ATTACH=kprobe
 * (a test knob: the kprobes on a kernel that has fentry too). A row with
 * no kprobe flavour (ATTACH_FUNCTION) whose fentry cannot attach is
 * unavailable (how NULL).
 */
void attach_choice_functions(struct attach_choice *c, int n);
/*
 * Load the chosen programs of @c's @n rows where @loaded, and none of their
 * others; several rows may choose one program (ATTACH_ENTRY).
 */
void attach_choice_set_autoload(const struct attach_choice *c, int n, const bool *loaded);
/*
 * Does the loader attach @c's chosen program itself, to @c's tracepoint?
 * So for a raw_tp program whose section names no tracepoint: libbpf's
 * skeleton attaches it to none, and it may serve several rows.
 */
bool attach_choice_by_loader(const struct attach_choice *c);
/* With -v: one line naming how each loaded attach point (@loaded NULL: all) attaches. */
void attach_choice_print(FILE *f, const char *tool, const struct attach_choice *c, int n,
			 const bool *loaded);
/*
 * An attach error (@err from the skeleton's attach) in one line; what the
 * kernel lacks when that is the cause, naming what @needs it.
 */
void attach_failure_say(int err, const char *needs);
/* Is parameter @index (from 0) of kernel function @function a pointer? */
bool kernel_param_is_pointer(const struct btf *vmlinux, const char *function, int index);
/*
 * Kernels without task storage: make @obj's task-storage maps hash maps of
 * thread ids. Returns whether task storage is used (the rodata flag).
 */
bool thread_storage_fallback(struct bpf_object *obj);
/*
 * The PTE hooks (pte_hooks.bpf.h): four consecutive rows, set_pte_range,
 * do_set_pte, do_set_pmd, and the read calls' sys_enter that goes with
 * them in place of raw_kern_entry's (ATTACH_PTE_HOOKS).
 */
#define ATTACH_PTE_HOOKS(p) \
	ATTACH_FUNCTION(p, "set_pte_range", 5, fentry_pte_range), \
	ATTACH_FUNCTION(p, "do_set_pte", 3, fentry_set_pte), \
	ATTACH_FUNCTION(p, "do_set_pmd", 0, fexit_set_pmd), \
	ATTACH_TRACEPOINT(p, "sys_enter", "raw_syscalls", read_entry)
enum { PTE_HOOK_ROWS = 4 };
/*
 * Faults from the PTE hooks, the rows @hooks of ATTACH_PTE_HOOKS: where
 * do_set_pmd and set_pte_range or do_set_pte attach, unless
 * PAGETRACE_FAULTS=events (a test knob: the fault events' inference on a
 * kernel that has both). Which of the rows to load into @load: the
 * fault events' rows, sys_enter's among them, load only when it is false.
 */
bool attach_choice_faults_from_ptes(const struct attach_choice *hooks, bool *load);
/* Does the kernel have bpf_loop (v5.17)? The walks of page state and of bios use it. */
bool kernel_has_bpf_loop(void);

/*
 * Why the kernel refused a program, in one line: libbpf's messages pass
 * through load_failure_note() (from the tool's libbpf print callback, -v or
 * not), which keeps the refused program's name and the verifier's reason
 * (a CO-RE relocation it could not resolve, or its last word).
 */
void load_failure_note(const char *format, va_list args);
/* "program NAME: REASON", or NULL when nothing was refused. */
const char *load_failure_describe(void);

/*
 * The readiness line, "TOOL: Tracing... Hit Ctrl-C to end." on stderr, said
 * once every program is attached: a script starts its workload after it.
 */
void say_ready(const char *tool);

#endif /* PAGETRACE_ATTACH_CHOICE_H */
