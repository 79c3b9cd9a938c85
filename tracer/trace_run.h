/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What trace's user-side files share: the options (trace_options.c), the
 * state of the run and the output (trace_output.c), loading and lost-event
 * counters (trace_load.c). trace.c runs the target and the poll loop.
 */
#ifndef PAGETRACE_TRACE_RUN_H
#define PAGETRACE_TRACE_RUN_H

#include "target_options.h"
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <bpf/libbpf.h>
#include <time.h>
#include <sys/types.h>

#define TOOL "trace"
/* PAGETRACE_VERSION comes from analysis/pagetrace/VERSION (the Makefile). */
#define TRACE_VERSION PAGETRACE_VERSION
/* trace's own exit status when the traced command succeeded but events were lost. */
#define EXIT_LOST 3

enum attach_mode { ATTACH_AUTO, ATTACH_TP_BTF, ATTACH_RAW_TP };

struct options {
	char *command;		/* -c: run through /bin/sh -c */
	char **argv;		/* or: -- CMD ARGS... */
	struct target target;	/* -p, --cgroup, --container NAME|ID: its cgroup */
	bool all;		/* -a */
	bool wait;		/* --wait: for the container to start */
	bool paths_container;	/* --paths container */
	bool no_children;
	bool extra;		/* -x */
	bool allow_lost;
	bool quiet;
	bool verbose;
	const char *output;	/* -o */
	const char *user;	/* --user */
	const char *btf_path;	/* --btf: kernel BTF from a file */
	double duration;	/* -d seconds, 0 = until the target ends */
	unsigned long ringbuf_bytes;
	enum attach_mode attach;
	bool no_bpf_loop;	/* test the pre-5.17 walk on any kernel */
	bool used;		/* --used: format 2, access and map records */
	bool drop_caches;	/* --drop-caches: the command starts cold */
	unsigned long page_states;	/* --page-states: entries of 64 pages, 0 = default */
	bool budget;		/* --budget: the verifier's figures, nothing traced */
	bool no_cost;		/* --no-cost: BPF run-time statistics left as they are */
};

extern struct options opts;

struct run_state {
	FILE *out;
	long long realtime_offset_ns;	/* REALTIME - MONOTONIC at start */
	unsigned long long start_mono_ns, end_mono_ns;
	unsigned long long pages, bios;
	unsigned long long metadata_pages;	/* of pages: metadata records */
	unsigned long long accessed, mapped;	/* --used: access and map records */
	/* The program trace starts (argv[0] on PATH, or /bin/sh for -c), as
	 * the tracer's file ids say it; whether a record read from it. */
	__u32 program_dev;
	unsigned long long program_ino;
	bool program_known, program_read;
	long page_size;
	bool write_failed;
	const char *attach_name;
	const char *walk_name;	/* how bios are walked: bpf_loop or unrolled */
};

extern struct run_state run;

struct lost_counts {
	unsigned long long ringbuf, path, long_bio, tasks, page_state, long_range, faults, total;
};

struct trace_bpf;
struct bpf_cost;

/* trace_container.c: --container. check: before loading, 0 or -1 (said);
 * wait: once attached, 0 (found, traced, and "trace: Tracing container NAME."
 * said on stderr), 1 (*stop first) or -1 (said). */
int container_target_check(void);
int container_target_wait(struct trace_bpf *skel, volatile sig_atomic_t *stop);
void container_target_free(void);

/* trace_options.c: 0, or -1 after saying why (exit status 2). */
int parse_options(int argc, char **argv);

/* trace_output.c */
unsigned long long clock_ns(clockid_t clock);
void measure_clock_offset(void);
/* The program trace starts, NAME as execvp() takes it: for the warm line. */
void note_program(const char *name);
int open_output(void);
void write_header(FILE *out);
int handle_event(void *ctx, void *data, size_t size);
void write_trailer(const struct lost_counts *lost, unsigned long long duration_us,
		   const struct bpf_cost *cost);
void report(const struct lost_counts *lost, unsigned long long duration_us,
	    const struct bpf_cost *cost);

/* trace_load.c */
/* libbpf's messages: -v prints them; a refusal is explained (engine_load.h). */
void trace_print_to_libbpf(void);
struct trace_bpf *load_programs(void);
/* The loaded programs attached (skel's, or the parts' of a split load). */
int attach_loaded(struct trace_bpf *skel);
/* Their run time so far (bpf_cost.h). */
void loaded_cost(struct trace_bpf *skel, struct bpf_cost *cost);
/* Detach and close them, and @skel. */
void unload_programs(struct trace_bpf *skel);
struct lost_counts read_lost(struct trace_bpf *skel);
/* --budget (bpf_budget.h): the exit status. */
int trace_budget(void);

#endif /* PAGETRACE_TRACE_RUN_H */
