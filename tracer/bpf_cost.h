/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a tracer tool costs, said by the tool itself: the time from its
 * start to tracing, by phase (-v), and the run time of its BPF programs.
 *
 * The run time is the kernel's own per-program counters (bpf_prog_info's
 * run_cnt and run_time_ns, and recursion_misses: runs the kernel skipped),
 * which count only while BPF run-time statistics are on. The tool turns
 * them on for its run with bpf(BPF_ENABLE_STATS) (v5.8): a file
 * descriptor, the statistics on while any such descriptor is open (the
 * kernel counts the holders), off again when the tool exits however it
 * exits. kernel.bpf_stats_enabled is never written: a tool killed could
 * not put it back. The counters are the tool's own programs' whoever else
 * turned the statistics on. Where the kernel refuses the descriptor (no
 * CAP_SYS_ADMIN), the counters still count while kernel.bpf_stats_enabled
 * is 1, and are taken when it was 1 at the start and at the end; else the
 * cost is "not measured", never a figure.
 */
#ifndef PAGETRACE_BPF_COST_H
#define PAGETRACE_BPF_COST_H

#include <stdbool.h>
#include <stdio.h>

struct bpf_object;

/* The phases from the tool's start to tracing: call cost_phase_start() first in main. */
void cost_phase_start(void);
/* The phase @name (a literal) ended now. */
void cost_phase(const char *name);
/* Seconds from cost_phase_start() to the last phase's end. */
double cost_phases_seconds(void);
/* "TOOL: load: T s to tracing: NAME T, ..." on @f. */
void cost_phases_print(FILE *f, const char *tool);

/* Turn the run-time statistics on (before attaching), unless @off; the reason is kept. */
void cost_stats_start(bool off);
/* Turn them off again (idempotent). */
void cost_stats_stop(void);

#define COST_PROGRAMS	64

struct cost_program {
	const char *name;
	unsigned long long runs, ns, missed;
};

struct bpf_cost {
	bool measured;
	const char *why_not;	/* when not measured */
	bool others_on;		/* kernel.bpf_stats_enabled was on too: said, not a doubt */
	unsigned long long runs, ns, missed;
	int n;
	struct cost_program program[COST_PROGRAMS];
};

/* The loaded programs' counters now of @objs, @n of them (read before they are closed). */
void cost_read(struct bpf_object *const *objs, int n, struct bpf_cost *cost);
/*
 * "TOOL: BPF cost: T ms in N runs (X ns a run)" or "TOOL: BPF cost: not
 * measured (why)" on @f; with @per_program, one line a program after it.
 */
void cost_print(FILE *f, const char *tool, const struct bpf_cost *cost, bool per_program);
/*
 * The same as JSON members, without braces: "bpf_ns", "bpf_runs" (absent
 * when not measured), "bpf_missed", and "bpf_programs": [{"name", "runs",
 * "ns", "missed"}, ...] ("runs" and "ns" absent when not measured).
 */
void cost_json(FILE *f, const struct bpf_cost *cost);

#endif /* PAGETRACE_BPF_COST_H */
