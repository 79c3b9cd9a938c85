// SPDX-License-Identifier: GPL-2.0
/*
 * bpf_cost: a tool's load time by phase and its BPF programs' run time,
 * from the kernel's own counters (bpf_cost.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "clock.h"
#include "errmsg.h"
#include "json.h"
#include "bpf_cost.h"

#define COST_PHASES	16

static struct {
	unsigned long long start_ns, last_ns;
	int n;
	struct {
		const char *name;
		unsigned long long ns;
	} phase[COST_PHASES];
} phases;

void cost_phase_start(void)
{
	phases.start_ns = phases.last_ns = monotonic_ns();
}

void cost_phase(const char *name)
{
	unsigned long long now = monotonic_ns();
	int i;

	/* A phase run twice (the raw_tp load after a refused tp_btf one) adds up. */
	for (i = 0; i < phases.n && strcmp(phases.phase[i].name, name); i++)
		;
	if (i == phases.n && phases.n < COST_PHASES)
		phases.phase[phases.n++].name = name;
	if (i < phases.n)
		phases.phase[i].ns += now - phases.last_ns;
	phases.last_ns = now;
}

double cost_phases_seconds(void)
{
	return (phases.last_ns - phases.start_ns) / 1e9;
}

void cost_phases_print(FILE *f, const char *tool)
{
	fprintf(f, "%s: load: %.3f s to tracing:", tool, cost_phases_seconds());
	for (int i = 0; i < phases.n; i++)
		fprintf(f, "%s %s %.3f", i ? "," : "", phases.phase[i].name, phases.phase[i].ns / 1e9);
	fputc('\n', f);
}

static struct {
	int fd;			/* BPF_ENABLE_STATS's, or -1 */
	bool sysctl_at_start;	/* kernel.bpf_stats_enabled was 1 */
	char why_not[160];
} stats = { .fd = -1 };

/* kernel.bpf_stats_enabled: 1, 0, or -1 when unreadable. */
static int stats_sysctl(void)
{
	char value[8] = "";
	int fd = open("/proc/sys/kernel/bpf_stats_enabled", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, value, sizeof(value) - 1) : -1;

	if (fd >= 0)
		close(fd);
	return n > 0 ? value[0] == '1' : -1;
}

void cost_stats_start(bool off)
{
	stats.sysctl_at_start = stats_sysctl() == 1;
	if (off) {
		snprintf(stats.why_not, sizeof(stats.why_not), "--no-cost");
		return;
	}
	stats.fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats.fd < 0)
		snprintf(stats.why_not, sizeof(stats.why_not), "the kernel refused BPF run-time "
			 "statistics: %s", errmsg_strerror(errno));
}

void cost_stats_stop(void)
{
	if (stats.fd >= 0)
		close(stats.fd);
	stats.fd = -1;
}

static void add_program(struct bpf_cost *cost, const struct bpf_program *prog)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	struct cost_program *p;

	if (cost->n == COST_PROGRAMS || bpf_program__fd(prog) < 0 ||
	    bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len))
		return;
	p = &cost->program[cost->n++];
	p->name = bpf_program__name(prog);
	/* Misses count whether the statistics are on or not (the kernel's bpf_prog_inc_misses_counter). */
	p->missed = info.recursion_misses;
	cost->missed += p->missed;
	if (!cost->measured)
		return;
	p->runs = info.run_cnt;
	p->ns = info.run_time_ns;
	cost->runs += p->runs;
	cost->ns += p->ns;
}

void cost_read(struct bpf_object *const *objs, int n, struct bpf_cost *cost)
{
	struct bpf_program *prog;
	bool sysctl_on = stats.sysctl_at_start && stats_sysctl() == 1;

	memset(cost, 0, sizeof(*cost));
	cost->others_on = sysctl_on;
	cost->measured = stats.fd >= 0 || sysctl_on;
	if (!cost->measured)
		cost->why_not = stats.why_not[0] ? stats.why_not : "BPF run-time statistics off";
	for (int i = 0; i < n; i++)
		bpf_object__for_each_program(prog, objs[i])
			add_program(cost, prog);
}

static int costlier_first(const void *a, const void *b)
{
	const struct cost_program *x = a, *y = b;

	return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : strcmp(x->name, y->name);
}

void cost_print(FILE *f, const char *tool, const struct bpf_cost *cost, bool per_program)
{
	struct cost_program sorted[COST_PROGRAMS];

	if (!cost->measured)
		fprintf(f, "%s: BPF cost: not measured (%s)", tool, cost->why_not);
	else
		fprintf(f, "%s: BPF cost: %.1f ms in %llu runs (%.0f ns a run)", tool,
			cost->ns / 1e6, cost->runs, cost->runs ? (double)cost->ns / cost->runs : 0.0);
	if (cost->missed)
		fprintf(f, "; %llu runs skipped by the kernel (a BPF program already running "
			"on the CPU)", cost->missed);
	fputc('\n', f);
	if (!per_program || !cost->measured)
		return;
	memcpy(sorted, cost->program, cost->n * sizeof(*sorted));
	qsort(sorted, cost->n, sizeof(*sorted), costlier_first);
	for (int i = 0; i < cost->n; i++)
		fprintf(f, "%s: BPF cost: %-24s %10llu runs %10.3f ms %8.0f ns a run, %llu skipped\n",
			tool, sorted[i].name, sorted[i].runs, sorted[i].ns / 1e6,
			sorted[i].runs ? (double)sorted[i].ns / sorted[i].runs : 0.0, sorted[i].missed);
}

void cost_json(FILE *f, const struct bpf_cost *cost)
{
	if (cost->measured)
		fprintf(f, "\"bpf_ns\": %llu, \"bpf_runs\": %llu, ", cost->ns, cost->runs);
	fprintf(f, "\"bpf_missed\": %llu, \"bpf_programs\": [", cost->missed);
	for (int i = 0; i < cost->n; i++) {
		fprintf(f, "%s{\"name\": ", i ? ", " : "");
		json_string(f, cost->program[i].name, strlen(cost->program[i].name));
		if (cost->measured)
			fprintf(f, ", \"runs\": %llu, \"ns\": %llu", cost->program[i].runs,
				cost->program[i].ns);
		fprintf(f, ", \"missed\": %llu}", cost->program[i].missed);
	}
	fputs("]", f);
}
