// SPDX-License-Identifier: GPL-2.0
/*
 * trace's kernel side from user space: which tracepoints this kernel has and
 * which programs load (tp_btf, else raw_tp), the rodata, and the per-CPU
 * counters of lost events.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include "trace.h"
#include "errmsg.h"
#include "trace_run.h"
#include "trace.skel.h"
#include "attach_choice.h"
#include "bpf_budget.h"

/* Why a tracepoint is attached. */
enum tracepoint_role {
	TP_REQUIRED,		/* trace cannot work without it */
	TP_CAUSE,		/* the cause column; optional, all or nothing */
	TP_CAUSE_AND_USED,	/* the cause column, and needed by --used */
	TP_USED,		/* only with --used, which needs it */
};

#define NR_TRACEPOINTS 15

static void describe_tracepoints(struct trace_bpf *skel, struct attach_choice *tps,
				 enum tracepoint_role *roles)
{
	__typeof__(skel->progs) *p = &skel->progs;
	struct attach_choice table[NR_TRACEPOINTS] = {
		ATTACH_BIO_AND_TASKS(p),
		ATTACH_TRACEPOINT(p, "sched_process_exec", "sched", exec),
		ATTACH_TRACEPOINT(p, "page_cache_sync_ra", "readahead", sync_ra),
		ATTACH_TRACEPOINT(p, "page_cache_async_ra", "readahead", async_ra),
		ATTACH_TRACEPOINT(p, "page_cache_ra_unbounded", "readahead", ra_unbounded),
		ATTACH_TRACEPOINT(p, "page_cache_ra_order", "readahead", ra_order),
		ATTACH_READS_AND_FAULTS(p),
		ATTACH_PAGE_ACCESS(p),
	};
	const enum tracepoint_role role_table[NR_TRACEPOINTS] = {
		TP_REQUIRED, TP_REQUIRED, TP_REQUIRED, TP_REQUIRED,
		TP_CAUSE, TP_CAUSE, TP_CAUSE, TP_CAUSE,
		TP_CAUSE_AND_USED, TP_CAUSE_AND_USED, TP_USED,
		TP_USED, TP_USED, TP_USED, TP_USED,
	};

	memcpy(tps, table, sizeof(table));
	memcpy(roles, role_table, sizeof(role_table));
}

static struct btf *load_kernel_btf(void)
{
	struct btf *vmlinux = opts.btf_path ? btf__parse(opts.btf_path, NULL) :
					      btf__load_vmlinux_btf();

	if (!vmlinux && opts.btf_path)
		errmsg("--btf", "%s: %s", opts.btf_path, errmsg_strerror(errno));
	else if (!vmlinux)
		errmsg("kernel BTF (/sys/kernel/btf/vmlinux)", "%s; pagetrace needs a kernel built "
		       "with CONFIG_DEBUG_INFO_BTF=y, or a BTF file for it given with --btf",
		       errmsg_strerror(errno));
	return vmlinux;
}

/* Name what this kernel lacks; returns how many needed attach points it lacks. */
static int report_missing(const struct attach_choice *tps, const enum tracepoint_role *roles,
			  int *missing_optional)
{
	int missing_required = 0;

	*missing_optional = 0;
	for (int i = 0; i < NR_TRACEPOINTS; i++) {
		bool needed = roles[i] == TP_REQUIRED || (opts.used && roles[i] != TP_CAUSE);
		const char *fallback = tps[i].function ? ", nor its function in BTF for fentry" : "";

		if (tps[i].how)
			continue;
		if (needed) {
			errmsg(NULL, "kernel lacks tracepoint %s:%s%s, which %s needs", tps[i].group,
			       tps[i].tracepoint, fallback,
			       roles[i] == TP_REQUIRED ? "pagetrace" : "--used");
			missing_required++;
		} else if (roles[i] != TP_USED && opts.extra) {
			if (!opts.quiet)
				errmsg(NULL, "kernel lacks tracepoint %s:%s; the cause column will be '-'",
				       tps[i].group, tps[i].tracepoint);
			(*missing_optional)++;
		}
	}
	return missing_required;
}

/*
 * Decide which programs load. Missing required tracepoints are fatal and
 * named; missing optional ones only cost the "cause" column.
 */
static int select_programs(struct trace_bpf *skel, bool use_btf, bool *want_cause,
			   struct attach_choice *tps, bool *loaded)
{
	enum tracepoint_role roles[NR_TRACEPOINTS];
	struct btf *vmlinux = load_kernel_btf();
	int missing_required, missing_optional;

	if (!vmlinux)
		return -1;
	describe_tracepoints(skel, tps, roles);
	for (int i = 0; i < NR_TRACEPOINTS; i++)
		attach_choice_find(&tps[i], vmlinux, use_btf);
	attach_choice_functions(tps, NR_TRACEPOINTS, vmlinux);
	skel->rodata->get_pages_takes_count =
		!kernel_param_is_pointer(vmlinux, "filemap_get_pages", 1);
	/* v6.1: --used reads a fault's VMA from it (vma_lookup.bpf.h). */
	missing_required = opts.used && btf__find_by_name_kind(vmlinux, "maple_tree",
							      BTF_KIND_STRUCT) < 0;
	if (missing_required)
		errmsg("--used", "the kernel lacks the maple tree of VMAs (v6.1), which --used reads");
	btf__free(vmlinux);
	missing_required += report_missing(tps, roles, &missing_optional);
	/*
	 * The cause is all or nothing: a partial cause would mislead. Only -x
	 * prints it: without, its programs (one more on every fault and
	 * readahead) are not loaded at all.
	 */
	*want_cause = opts.extra && missing_optional == 0;
	for (int i = 0; i < NR_TRACEPOINTS; i++) {
		enum tracepoint_role role = roles[i];

		loaded[i] = tps[i].how && (role == TP_REQUIRED ||
			(role == TP_CAUSE && *want_cause) ||
			(role == TP_CAUSE_AND_USED && (*want_cause || opts.used)) ||
			(role == TP_USED && opts.used));
		attach_choice_set_autoload(&tps[i], loaded[i]);
	}
	return missing_required ? -1 : 0;
}

/*
 * The address of a kernel function, from /proc/kallsyms; 0 when the kernel
 * lacks it or hides addresses (kptr_restrict). Used to recognise
 * blk-throttle's worker (trace.bpf.c: throttled_for_traced).
 */
static __u64 kernel_function_address(const char *name)
{
	FILE *f = fopen("/proc/kallsyms", "r");
	char line[256], symbol[128], type;
	unsigned long long address;
	__u64 found = 0;

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

int trace_libbpf_print(enum libbpf_print_level level, const char *format, va_list args)
{
	va_list copy;

	if (level != LIBBPF_DEBUG) {
		va_copy(copy, args);
		load_failure_note(format, copy);	/* explained by trace itself */
		va_end(copy);
	}
	if (!opts.verbose)
		return 0;
	return vfprintf(stderr, format, args);
}

static void explain_load_error(int err)
{
	/* As root, EACCES is the verifier's refusal, not a missing privilege. */
	if (err == -EPERM || (err == -EACCES && geteuid() != 0))
		errmsg("loading BPF programs", "%s: run as root, or with CAP_BPF and CAP_PERFMON "
		       "(uid %d)", errmsg_strerror(-err), (int)getuid());
	else if (load_failure_describe())
		errmsg("loading BPF programs", "the kernel refused %s (rerun with -v for the "
		       "verifier's log)", load_failure_describe());
	else
		errmsg("loading BPF programs", "%s (rerun with -v for the verifier's log)",
		       errmsg_strerror(-err));
}

/* --budget: the configuration being measured (NULL: not measuring), and the programs over. */
static const char *budget_config;
static int budget_over;

/* open -> set rodata -> load, with either the tp_btf or the raw_tp programs. */
static struct trace_bpf *open_and_load(bool use_btf, int *err)
{
	LIBBPF_OPTS(bpf_object_open_opts, open_opts, .btf_custom_path = opts.btf_path);
	struct attach_choice tps[NR_TRACEPOINTS];
	struct trace_bpf *skel = trace_bpf__open_opts(&open_opts);
	bool want_cause = false, loaded[NR_TRACEPOINTS];

	if (!skel) {
		*err = -errno;
		errmsg("opening BPF object", "%s", errmsg_strerror(errno));
		return NULL;
	}
	if (select_programs(skel, use_btf, &want_cause, tps, loaded)) {
		*err = -ENOENT;
		goto fail;
	}
	skel->rodata->trace_all = opts.all;
	skel->rodata->follow_children = !opts.no_children;
	skel->rodata->trace_cgroup = opts.cgroup_path || opts.container;
	skel->bss->target_cgroup_id = opts.cgroup.id;
	skel->bss->target_cgroup_level = opts.cgroup.level;
	skel->data->target_cgroup_subsys = opts.cgroup.subsys;
	skel->rodata->want_cause = want_cause;
	skel->rodata->want_used = opts.used;
	skel->rodata->page_shift = __builtin_ctzl((unsigned long)run.page_size);
	skel->rodata->use_bpf_loop = !opts.no_bpf_loop && kernel_has_bpf_loop();
	run.walk_name = skel->rodata->use_bpf_loop ? "bpf_loop" : "unrolled";
	/* Unrolled, the metadata branch makes the walk too long to verify. */
	skel->rodata->want_metadata = skel->rodata->use_bpf_loop;

	if (opts.used && !skel->rodata->use_bpf_loop) {
		errmsg("--used", "the kernel lacks bpf_loop (v5.17), which --used needs");
		*err = -ENOENT;
		goto fail;
	}
	/* -a credits every bio already: no need to scan /proc/kallsyms. */
	if (!opts.all)
		skel->rodata->throttle_dispatch_fn =
			kernel_function_address("blk_throtl_dispatch_work_fn");
	bpf_map__set_max_entries(skel->maps.events, opts.ringbuf_bytes);
	if (opts.page_states)
		bpf_map__set_max_entries(skel->maps.page_states, opts.page_states);
	skel->rodata->wakeup_bytes = opts.ringbuf_bytes / 4;
	skel->rodata->use_task_storage = thread_storage_fallback(skel->obj);
	if (budget_config && budget_prepare(skel->obj)) {
		*err = -ENOENT;
		goto fail;
	}
	*err = trace_bpf__load(skel);
	if (budget_config)
		budget_over += budget_report(stdout, skel->obj, !*err, TOOL, budget_config,
					     use_btf ? "tp_btf" : "raw_tp");
	if (*err)
		goto fail;
	if (opts.verbose)
		attach_choice_print(stderr, TOOL, tps, NR_TRACEPOINTS, loaded);
	return skel;
fail:
	trace_bpf__destroy(skel);
	return NULL;
}

struct trace_bpf *load_programs(void)
{
	struct trace_bpf *skel = NULL;
	int err = 0;

	if (opts.attach != ATTACH_RAW_TP) {
		skel = open_and_load(true, &err);
		run.attach_name = "tp_btf";
		if (skel || err == -ENOENT || opts.attach == ATTACH_TP_BTF)
			goto out;
		if (opts.verbose)
			fprintf(stderr, "%s: tp_btf programs refused (%s); trying raw_tp\n", TOOL, strerror(-err));
	}
	skel = open_and_load(false, &err);
	run.attach_name = "raw_tp";
out:
	if (!skel && err != -ENOENT)
		explain_load_error(err);
	if (skel && !skel->rodata->use_bpf_loop && !opts.no_bpf_loop && !opts.quiet)
		errmsg(NULL, "the kernel lacks bpf_loop (v5.17): metadata reads are not recorded");
	return skel;
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
	static const struct {
		const char *name;
		bool extra, used, no_bpf_loop;
	} configs[] = {
		{ "default", false, false, false },
		{ "-x,--used", true, true, false },
		{ "-x,unrolled", true, false, true },
	};
	int refused = 0, err;
	bool has_bpf_loop = kernel_has_bpf_loop();

	budget_header(stdout);
	for (int btf = 1; btf >= 0; btf--) {
		for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
			struct trace_bpf *skel;

			if (configs[i].no_bpf_loop && has_bpf_loop) {
				printf("# %s %s %s: not measured: this kernel has bpf_loop, and the "
				       "loader picks the unrolled walk only without it\n", TOOL,
				       configs[i].name, btf ? "tp_btf" : "raw_tp");
				continue;
			}
			opts.extra = configs[i].extra;
			opts.used = configs[i].used;
			opts.no_bpf_loop = configs[i].no_bpf_loop;
			budget_config = configs[i].name;
			skel = open_and_load(btf, &err);
			if (!skel && err == -ENOENT)
				printf("# %s %s %s: not loadable on this kernel (said above)\n", TOOL,
				       configs[i].name, btf ? "tp_btf" : "raw_tp");
			else if (!skel)
				explain_load_error(err), refused++;
			trace_bpf__destroy(skel);
		}
	}
	return budget_verdict(TOOL, budget_over, refused);
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

