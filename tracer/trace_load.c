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

/* Why a tracepoint is attached. */
enum tracepoint_role {
	TP_REQUIRED,		/* trace cannot work without it */
	TP_CAUSE,		/* the cause column; optional, all or nothing */
	TP_CAUSE_AND_USED,	/* the cause column, and needed by --used */
	TP_USED,		/* only with --used, which needs it */
};

struct tracepoint_progs {
	const char *name;	/* tracepoint, e.g. "block_bio_queue" */
	const char *group;	/* its tracefs group, for messages */
	enum tracepoint_role role;
	struct bpf_program *btf_prog, *raw_prog;
};

#define NR_TRACEPOINTS 14

static void describe_tracepoints(struct trace_bpf *skel, struct tracepoint_progs *tps)
{
	struct tracepoint_progs table[NR_TRACEPOINTS] = {
		{ "block_bio_queue", "block", TP_REQUIRED, skel->progs.btf_bio_queue, skel->progs.raw_bio_queue },
		{ "sched_process_fork", "sched", TP_REQUIRED, skel->progs.btf_fork, skel->progs.raw_fork },
		{ "sched_process_exit", "sched", TP_REQUIRED, skel->progs.btf_exit, skel->progs.raw_exit },
		{ "sched_process_exec", "sched", TP_REQUIRED, skel->progs.btf_exec, skel->progs.raw_exec },
		{ "page_cache_sync_ra", "readahead", TP_CAUSE, skel->progs.btf_sync_ra, skel->progs.raw_sync_ra },
		{ "page_cache_async_ra", "readahead", TP_CAUSE, skel->progs.btf_async_ra, skel->progs.raw_async_ra },
		{ "page_cache_ra_unbounded", "readahead", TP_CAUSE, skel->progs.btf_ra_unbounded, skel->progs.raw_ra_unbounded },
		{ "page_cache_ra_order", "readahead", TP_CAUSE, skel->progs.btf_ra_order, skel->progs.raw_ra_order },
		{ "mm_filemap_fault", "filemap", TP_CAUSE_AND_USED, skel->progs.btf_fault, skel->progs.raw_fault },
		{ "mm_filemap_get_pages", "filemap", TP_CAUSE_AND_USED, skel->progs.btf_get_pages, skel->progs.raw_get_pages },
		{ "mm_filemap_map_pages", "filemap", TP_USED, skel->progs.btf_map_pages, skel->progs.raw_map_pages },
		{ "page_fault_user", "exceptions", TP_USED, skel->progs.btf_fault_user, skel->progs.raw_fault_user },
		{ "page_fault_kernel", "exceptions", TP_USED, skel->progs.btf_fault_kernel, skel->progs.raw_fault_kernel },
		{ "sys_enter", "raw_syscalls", TP_USED, skel->progs.btf_read_syscall, skel->progs.raw_read_syscall },
	};

	memcpy(tps, table, sizeof(table));
}

/* Does the kernel have this tracepoint? Its BTF names a btf_trace_<name> typedef. */
static bool kernel_has_tracepoint(const struct btf *vmlinux, const char *name)
{
	char type_name[128];

	snprintf(type_name, sizeof(type_name), "btf_trace_%s", name);
	return btf__find_by_name_kind(vmlinux, type_name, BTF_KIND_TYPEDEF) >= 0;
}

/*
 * Decide which programs load. Missing required tracepoints are fatal and
 * named; missing optional ones only cost the "cause" column.
 */
static int select_programs(struct tracepoint_progs *tps, bool use_btf, bool *want_cause)
{
	struct btf *vmlinux = opts.btf_path ? btf__parse(opts.btf_path, NULL) :
					      btf__load_vmlinux_btf();
	int missing_required = 0, missing_optional = 0;
	bool present[NR_TRACEPOINTS];

	if (!vmlinux && opts.btf_path) {
		errmsg("--btf", "%s: %s", opts.btf_path, errmsg_strerror(errno));
		return -1;
	}
	if (!vmlinux) {
		errmsg("kernel BTF (/sys/kernel/btf/vmlinux)", "%s; pagetrace needs a kernel built "
		       "with CONFIG_DEBUG_INFO_BTF=y, or a BTF file for it given with --btf",
		       errmsg_strerror(errno));
		return -1;
	}
	for (int i = 0; i < NR_TRACEPOINTS; i++) {
		enum tracepoint_role role = tps[i].role;
		bool needed = role == TP_REQUIRED || (opts.used && role != TP_CAUSE);

		present[i] = kernel_has_tracepoint(vmlinux, tps[i].name);
		if (!present[i] && needed) {
			errmsg(NULL, "kernel lacks tracepoint %s:%s, which %s needs", tps[i].group,
			       tps[i].name, role == TP_REQUIRED ? "pagetrace" : "--used");
			missing_required++;
		} else if (!present[i] && role != TP_USED && opts.extra) {
			if (!opts.quiet)
				errmsg(NULL, "kernel lacks tracepoint %s:%s; the cause column will be '-'",
				       tps[i].group, tps[i].name);
			missing_optional++;
		}
	}
	btf__free(vmlinux);
	/*
	 * The cause is all or nothing: a partial cause would mislead. Only -x
	 * prints it: without, its programs (one more on every fault and
	 * readahead) are not loaded at all.
	 */
	*want_cause = opts.extra && missing_optional == 0;
	for (int i = 0; i < NR_TRACEPOINTS; i++) {
		enum tracepoint_role role = tps[i].role;
		bool load = present[i] && (role == TP_REQUIRED ||
			(role == TP_CAUSE && *want_cause) ||
			(role == TP_CAUSE_AND_USED && (*want_cause || opts.used)) ||
			(role == TP_USED && opts.used));

		bpf_program__set_autoload(tps[i].btf_prog, load && use_btf);
		bpf_program__set_autoload(tps[i].raw_prog, load && !use_btf);
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

int libbpf_print(enum libbpf_print_level level, const char *format, va_list args)
{
	if (level == LIBBPF_DEBUG && !opts.verbose)
		return 0;
	if (!opts.verbose)
		return 0;	/* load failures are explained by trace itself */
	return vfprintf(stderr, format, args);
}

static void explain_load_error(int err)
{
	/* As root, EACCES is the verifier's refusal, not a missing privilege. */
	if (err == -EPERM || (err == -EACCES && geteuid() != 0))
		errmsg("loading BPF programs", "%s: run as root, or with CAP_BPF and CAP_PERFMON "
		       "(uid %d)", errmsg_strerror(-err), (int)getuid());
	else
		errmsg("loading BPF programs", "%s (rerun with -v for the verifier's log)",
		       errmsg_strerror(-err));
}

/* open -> set rodata -> load, with either the tp_btf or the raw_tp programs. */
static struct trace_bpf *open_and_load(bool use_btf, int *err)
{
	LIBBPF_OPTS(bpf_object_open_opts, open_opts, .btf_custom_path = opts.btf_path);
	struct tracepoint_progs tps[NR_TRACEPOINTS];
	struct trace_bpf *skel = trace_bpf__open_opts(&open_opts);
	bool want_cause = false;

	if (!skel) {
		*err = -errno;
		errmsg("opening BPF object", "%s", errmsg_strerror(errno));
		return NULL;
	}
	describe_tracepoints(skel, tps);
	if (select_programs(tps, use_btf, &want_cause)) {
		*err = -ENOENT;
		goto fail;
	}
	skel->rodata->trace_all = opts.all;
	skel->rodata->follow_children = !opts.no_children;
	skel->rodata->want_cause = want_cause;
	skel->rodata->want_used = opts.used;
	skel->rodata->page_shift = __builtin_ctzl((unsigned long)run.page_size);
	/* libbpf cannot probe helpers for tracing programs; the helper set is the same. */
	skel->rodata->use_bpf_loop = !opts.no_bpf_loop &&
		libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_loop, NULL) == 1;
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
	*err = trace_bpf__load(skel);
	if (*err)
		goto fail;
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
	return skel;
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
	};

	lost.total = lost.ringbuf + lost.path + lost.long_bio + lost.tasks +
		     lost.page_state + lost.long_range;
	return lost;
}

