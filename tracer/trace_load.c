// SPDX-License-Identifier: GPL-2.0
/*
 * trace's kernel side from user space: its table for the engine loader
 * (engine_load.h): its tracepoints, their roles and the rodata;
 * its --budget configurations; and the per-CPU counters of lost events.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include "trace_events.h"
#include "errmsg.h"
#include "trace_run.h"
#include "trace.skel.h"
#include "attach_choice.h"
#include "bpf_cost.h"
#include "engine_load.h"

/* Why a tracepoint is attached. */
enum tracepoint_role {
	TP_REQUIRED,		/* trace cannot work without it */
	TP_CAUSE,		/* the cause column; optional, all or nothing */
	TP_CAUSE_AND_USED,	/* the cause column, and needed by --used */
	TP_USED,		/* only with --used, which needs it */
	TP_FAULT_EVENT,		/* --used's faults, where the PTE hooks are not loaded */
	TP_PTE,			/* --used's faults where the page tables are set */
};

#define NR_TRACEPOINTS 18

/* The tracepoints, in the order of their roles below. */
ENGINE_SKELETON(trace, NR_TRACEPOINTS,
	ATTACH_BIO_AND_TASKS(p),
	ATTACH_TRACEPOINT(p, "sched_process_exec", "sched", exec),
	ATTACH_TRACEPOINT(p, "page_cache_sync_ra", "readahead", sync_ra),
	ATTACH_TRACEPOINT(p, "page_cache_async_ra", "readahead", async_ra),
	ATTACH_TRACEPOINT(p, "page_cache_ra_unbounded", "readahead", ra_unbounded),
	ATTACH_TRACEPOINT(p, "page_cache_ra_order", "readahead", ra_order),
	ATTACH_READS_AND_FAULTS(p),
	ATTACH_PAGE_ACCESS(p),
	ATTACH_PTE_HOOKS(p));

/* The rows: mm_filemap_fault, then map_pages, the fault tracepoints, sys_enter; the PTE hooks. */
enum { ROW_FAULT = 8, ROW_PTE_HOOKS = 14 };

static const enum tracepoint_role roles[NR_TRACEPOINTS] = {
	TP_REQUIRED, TP_REQUIRED, TP_REQUIRED, TP_REQUIRED,
	TP_CAUSE, TP_CAUSE, TP_CAUSE, TP_CAUSE,
	TP_CAUSE_AND_USED, TP_CAUSE_AND_USED, TP_FAULT_EVENT,
	TP_FAULT_EVENT, TP_FAULT_EVENT, TP_FAULT_EVENT,
	TP_PTE, TP_PTE, TP_PTE, TP_PTE,
};

/* --used's faults from the PTE hooks (pte_hooks.bpf.h), and which of their rows load. */
static bool faults_from_ptes(const struct attach_choice *tps, bool *load)
{
	return attach_choice_faults_from_ptes(&tps[ROW_PTE_HOOKS], load) && opts.used;
}

/* Which tracepoints are needed, and by whom; with -x, say the optional ones this kernel lacks. */
static int missing_optional(const struct attach_choice *tps, struct engine_point *p, bool ptes)
{
	int missing = 0;

	for (int i = 0; i < NR_TRACEPOINTS; i++) {
		if (roles[i] == TP_REQUIRED)
			p[i].needed_by = "pagetrace";
		else if (opts.used && (roles[i] == TP_USED || roles[i] == TP_CAUSE_AND_USED ||
				       (roles[i] == TP_FAULT_EVENT && !ptes)))
			p[i].needed_by = "--used";
		if (tps[i].how || p[i].needed_by || roles[i] >= TP_USED || !opts.extra)
			continue;
		if (!opts.quiet)
			errmsg(NULL, "kernel lacks tracepoint %s:%s; the cause column will be '-'",
			       tps[i].group, tps[i].tracepoint);
		missing++;
	}
	return missing;
}

/* trace's settings in a --budget configuration. */
struct budget_settings {
	bool extra, used, no_bpf_loop;
};

/*
 * The engine's select: which programs load (@arg: a --budget configuration,
 * or NULL: the options). Missing required tracepoints are fatal and named
 * (engine_load.c); missing optional ones only cost the "cause" column.
 */
static void select_programs(void *skel_, const struct attach_choice *tps, struct engine_point *p,
			    const void *arg)
{
	const struct budget_settings *settings = arg;
	struct trace_bpf *skel = skel_;
	bool want_cause, ptes, pte_rows[PTE_HOOK_ROWS];

	if (settings) {
		opts.extra = settings->extra;
		opts.used = settings->used;
		opts.no_bpf_loop = settings->no_bpf_loop;
	}
	/*
	 * The cause is all or nothing: a partial cause would mislead. Only -x
	 * prints it: without, its programs (one more on every fault and
	 * readahead) are not loaded at all.
	 */
	ptes = faults_from_ptes(tps, pte_rows);
	want_cause = missing_optional(tps, p, ptes) == 0 && opts.extra;
	skel->rodata->want_cause = want_cause;
	skel->rodata->faults_from_ptes = ptes;
	for (int i = 0; i < NR_TRACEPOINTS; i++) {
		enum tracepoint_role role = roles[i];

		p[i].load = role == TP_REQUIRED ||
			(role == TP_CAUSE && want_cause) ||
			(role == TP_CAUSE_AND_USED && (want_cause || opts.used)) ||
			(role == TP_USED && opts.used) ||
			(role == TP_FAULT_EVENT && opts.used && !ptes) ||
			(role == TP_PTE && ptes && pte_rows[i - ROW_PTE_HOOKS]);
	}
	/* Its faults come from the PTE hooks: mm_filemap_fault only for the cause. */
	if (ptes)
		p[ROW_FAULT].load = want_cause;
}

/* The context of symbol_lookup()'s program: the name in, its address out. */
struct symbol_lookup {
	char name[64];
	__u64 address;
};

/*
 * The address of kernel symbol @name into *@address, from the kernel
 * itself: bpf_kallsyms_lookup_name() (v5.16), which only syscall programs
 * may call, run once with the name as its context: one lookup, where
 * reading /proc/kallsyms has the kernel format every symbol it has. The
 * helper answers only whom /proc/kallsyms would show addresses to
 * (kptr_restrict). Returns 0 (found), -ENOENT (no such symbol), or another
 * error where the kernel cannot say.
 */
static int symbol_lookup(const char *name, __u64 *address)
{
	enum { NAME = sizeof(((struct symbol_lookup *)0)->name), WORDS = NAME / 8 };
	/* The name goes to the stack: helpers take no context memory. */
	struct bpf_insn insns[2 * WORDS + 12] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_6, .src_reg = BPF_REG_1 },
	};
	struct bpf_insn *insn = insns + 1;

	for (int i = 0; i < WORDS; i++) {	/* fp[-8 - NAME + 8 i] = ctx->name[8 i] */
		*insn++ = (struct bpf_insn){ .code = BPF_LDX | BPF_MEM | BPF_DW,
					     .dst_reg = BPF_REG_1, .src_reg = BPF_REG_6, .off = 8 * i };
		*insn++ = (struct bpf_insn){ .code = BPF_STX | BPF_MEM | BPF_DW,
					     .dst_reg = BPF_REG_10, .src_reg = BPF_REG_1,
					     .off = -8 - NAME + 8 * i };
	}
	/* r0 = lookup(fp - 8 - NAME, NAME, 0, fp - 8) */
	*insn++ = (struct bpf_insn){ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_1,
				     .src_reg = BPF_REG_10 };
	*insn++ = (struct bpf_insn){ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_1,
				     .imm = -8 - NAME };
	*insn++ = (struct bpf_insn){ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_2,
				     .imm = NAME };
	*insn++ = (struct bpf_insn){ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_3 };
	*insn++ = (struct bpf_insn){ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_4,
				     .src_reg = BPF_REG_10 };
	*insn++ = (struct bpf_insn){ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_4,
				     .imm = -8 };
	*insn++ = (struct bpf_insn){ .code = BPF_JMP | BPF_CALL,
				     .imm = BPF_FUNC_kallsyms_lookup_name };
	/* if (r0 == 0) ctx->address = fp[-8]; return r0 */
	*insn++ = (struct bpf_insn){ .code = BPF_JMP | BPF_JNE | BPF_K, .dst_reg = BPF_REG_0,
				     .off = 2 };
	*insn++ = (struct bpf_insn){ .code = BPF_LDX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_1,
				     .src_reg = BPF_REG_10, .off = -8 };
	*insn++ = (struct bpf_insn){ .code = BPF_STX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_6,
				     .src_reg = BPF_REG_1,
				     .off = offsetof(struct symbol_lookup, address) };
	*insn++ = (struct bpf_insn){ .code = BPF_JMP | BPF_EXIT };
	/* Syscall programs are sleepable only. */
	LIBBPF_OPTS(bpf_prog_load_opts, load, .prog_flags = BPF_F_SLEEPABLE);
	struct symbol_lookup ctx = {};
	LIBBPF_OPTS(bpf_test_run_opts, run_opts, .ctx_in = &ctx, .ctx_size_in = sizeof(ctx));
	int prog, err;

	if (strlen(name) >= sizeof(ctx.name))
		return -ENAMETOOLONG;
	strcpy(ctx.name, name);
	prog = bpf_prog_load(BPF_PROG_TYPE_SYSCALL, "symbol_lookup", "GPL", insns, insn - insns,
			     &load);
	if (prog < 0)
		return prog;
	err = bpf_prog_test_run_opts(prog, &run_opts);
	close(prog);
	if (err)
		return err;
	*address = ctx.address;
	return (int)run_opts.retval;
}

/*
 * The address of a kernel function: from the kernel (symbol_lookup), else
 * from /proc/kallsyms; 0 when the kernel lacks it or hides addresses
 * (kptr_restrict). Used to recognise blk-throttle's worker (trace.bpf.c:
 * throttled_for_traced).
 */
static __u64 kernel_function_address(const char *name)
{
	char line[256], symbol[128], type;
	unsigned long long address;
	__u64 found = 0;
	int err = symbol_lookup(name, &found);
	FILE *f;

	if (!err || err == -ENOENT)
		return found;
	if (opts.verbose)
		fprintf(stderr, "%s: load: bpf_kallsyms_lookup_name() refused (%s): reading "
			"/proc/kallsyms\n", TOOL, strerror(-err));
	f = fopen("/proc/kallsyms", "r");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strstr(line, name) &&
		    sscanf(line, "%llx %c %127s", &address, &type, symbol) == 3 &&
		    (type == 't' || type == 'T') && strcmp(symbol, name) == 0)
			found = address;
	}
	fclose(f);
	return found;
}

/* The rodata and the maps' sizes from the options and the kernel; 0, or -ENOENT once said. */
static int configure(void *skel_, const struct btf *vmlinux, const void *arg)
{
	struct trace_bpf *skel = skel_;

	(void)arg;	/* applied by select_programs */
	skel->rodata->get_pages_takes_count =
		!kernel_param_is_pointer(vmlinux, "filemap_get_pages", 1);
	skel->rodata->trace_all = opts.all;
	skel->rodata->follow_children = !opts.no_children;
	skel->rodata->trace_cgroup = opts.target.cgroup_path || opts.target.container;
	skel->bss->target_cgroup_id = opts.target.cgroup.id;
	skel->bss->target_cgroup_level = opts.target.cgroup.level;
	skel->data->target_cgroup_subsys = opts.target.cgroup.subsys;
	skel->rodata->want_used = opts.used;
	skel->rodata->page_shift = __builtin_ctzl((unsigned long)run.page_size);
	skel->rodata->use_bpf_loop = !opts.no_bpf_loop && kernel_has_bpf_loop();
	run.walk_name = skel->rodata->use_bpf_loop ? "bpf_loop" : "unrolled";
	/* Unrolled, the metadata branch makes the walk too long to verify. */
	skel->rodata->want_metadata = skel->rodata->use_bpf_loop;
	if (opts.used && !skel->rodata->use_bpf_loop) {
		errmsg("--used", "the kernel lacks bpf_loop (v5.17), which --used needs");
		return -ENOENT;
	}
	cost_phase("probes");
	/* -a credits every bio already: no need to look blk-throttle's worker up. */
	if (!opts.all)
		skel->rodata->throttle_dispatch_fn =
			kernel_function_address("blk_throtl_dispatch_work_fn");
	cost_phase("kernel symbol");
	bpf_map__set_max_entries(skel->maps.events, opts.ringbuf_bytes);
	if (opts.page_states)
		bpf_map__set_max_entries(skel->maps.page_states, opts.page_states);
	skel->rodata->wakeup_bytes = opts.ringbuf_bytes / 4;
	skel->rodata->use_task_storage = thread_storage_fallback(skel->obj);
	return 0;
}

/* The table: trace.bpf.c, its tracepoints and their roles, its setup. */
static struct engine engine = {
	.tool = TOOL,
	ENGINE_OF(trace),
	.select = select_programs,
	.configure = configure,
	.btf_option = true,
};

void trace_print_to_libbpf(void)
{
	engine.verbose = opts.verbose;
	engine_print_to(&engine);
}

struct trace_bpf *load_programs(void)
{
	static const enum engine_flavour flavour[] = {
		[ATTACH_AUTO] = ENGINE_AUTO, [ATTACH_TP_BTF] = ENGINE_TP_BTF,
		[ATTACH_RAW_TP] = ENGINE_RAW_TP,
	};
	struct trace_bpf *skel;

	engine.btf_path = opts.btf_path;
	engine.verbose = engine.explain = opts.verbose;
	/* --used's many programs load in two halves on two CPUs or more. */
	engine.may_split = opts.used;
	skel = engine_load(&engine, NULL, flavour[opts.attach]);
	run.attach_name = engine.flavour;
	if (skel && !skel->rodata->use_bpf_loop && !opts.no_bpf_loop && !opts.quiet)
		errmsg(NULL, "the kernel lacks bpf_loop (v5.17): metadata reads are not recorded");
	return skel;
}

int attach_loaded(struct trace_bpf *skel)
{
	(void)skel;	/* the engine's */
	return engine_attach(&engine);
}

void loaded_cost(struct trace_bpf *skel, struct bpf_cost *cost)
{
	(void)skel;
	engine_cost(&engine, cost);
}

void unload_programs(struct trace_bpf *skel)
{
	(void)skel;
	engine_unload(&engine);
}

/*
 * trace --budget: load (never attach) each configuration whose programs the
 * verifier sees differently, with tp_btf and with raw_tp; one row a program.
 * A configuration this kernel cannot load (--used without bpf_loop) is said
 * and skipped; so is the unrolled walk where the kernel has bpf_loop: the
 * loader picks it only without (--no-bpf-loop forces it, for tests only).
 * A refusal fails.
 */
int trace_budget(void)
{
	static const struct budget_settings plain = {}, used = { true, true, false },
		unrolled = { true, false, true };
	static const struct engine_config configs[] = {
		{ TOOL, "default", &plain, false },
		{ TOOL, "-x,--used", &used, false },
		{ TOOL, "-x,unrolled", &unrolled, true },
	};

	engine.btf_path = opts.btf_path;
	engine.verbose = opts.verbose;
	engine.explain = false;
	return engine_budget(&engine, configs, sizeof(configs) / sizeof(configs[0]));
}

static unsigned long long counter_total(struct trace_bpf *skel, __u32 slot)
{
	int ncpus = libbpf_num_possible_cpus();
	unsigned long long total = 0;
	__u64 *values;

	if (ncpus <= 0)
		return 0;
	values = calloc(ncpus, sizeof(*values));
	if (!values)
		return 0;
	if (!bpf_map__lookup_elem(skel->maps.counters, &slot, sizeof(slot), values,
				  sizeof(*values) * ncpus, 0))
		for (int i = 0; i < ncpus; i++)
			total += values[i];
	free(values);
	return total;
}


struct lost_counts read_lost(struct trace_bpf *skel)
{
	struct lost_counts lost = {
		.ringbuf = counter_total(skel, COUNTER_LOST_RINGBUF),
		.path = counter_total(skel, COUNTER_LOST_PATH),
		.long_bio = counter_total(skel, COUNTER_LOST_LONG_BIO),
		.tasks = counter_total(skel, COUNTER_LOST_TASKS),
		.page_state = counter_total(skel, COUNTER_LOST_PAGE_STATE),
		.long_range = counter_total(skel, COUNTER_LOST_LONG_RANGE),
		.faults = counter_total(skel, COUNTER_LOST_FAULT),
	};

	lost.total = lost.ringbuf + lost.path + lost.long_bio + lost.tasks +
		     lost.page_state + lost.long_range + lost.faults;
	return lost;
}

