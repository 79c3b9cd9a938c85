/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What trace's user-side files share: the options (trace_options.c), the
 * state of the run and the output (trace_output.c), loading and lost-event
 * counters (trace_load.c). trace.c runs the target and the poll loop.
 */
#ifndef PAGETRACE_TRACE_RUN_H
#define PAGETRACE_TRACE_RUN_H

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
	pid_t pid;		/* -p */
	bool all;		/* -a */
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
	unsigned long page_states;	/* --page-states: entries of 64 pages, 0 = default */
};

extern struct options opts;

struct run_state {
	FILE *out;
	long long realtime_offset_ns;	/* REALTIME - MONOTONIC at start */
	unsigned long long start_mono_ns, end_mono_ns;
	unsigned long long pages, bios;
	unsigned long long metadata_pages;	/* of pages: metadata records */
	unsigned long long accessed, mapped;	/* --used: access and map records */
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

/* trace_options.c: 0, or -1 after saying why (exit status 2). */
int parse_options(int argc, char **argv);

/* trace_output.c */
unsigned long long clock_ns(clockid_t clock);
void measure_clock_offset(void);
int open_output(void);
void write_header(FILE *out);
int handle_event(void *ctx, void *data, size_t size);
void write_trailer(const struct lost_counts *lost, unsigned long long duration_us);
void report(const struct lost_counts *lost, unsigned long long duration_us);

/* trace_load.c */
int trace_libbpf_print(enum libbpf_print_level level, const char *format, va_list args);
struct trace_bpf *load_programs(void);
struct lost_counts read_lost(struct trace_bpf *skel);

#endif /* PAGETRACE_TRACE_RUN_H */
