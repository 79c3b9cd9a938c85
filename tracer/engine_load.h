/* SPDX-License-Identifier: GPL-2.0 */
/*
 * One loader for the page-access engine of trace (trace.bpf.c) and of the
 * cache tools (cache.bpf.c), driven by each tool's table: its skeleton, its
 * attach points (attach_choice.h), a select that picks which of them load
 * and a configure that fills the rodata for one configuration. The loader
 * finds how each point attaches on the running kernel, says what the
 * kernel lacks, loads (tp_btf, else raw_tp; in two halves where allowed, split_load.h),
 * explains a refusal, and measures the verifier's budget of each
 * configuration once (bpf_budget.h).
 */
#ifndef PAGETRACE_ENGINE_LOAD_H
#define PAGETRACE_ENGINE_LOAD_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <bpf/libbpf.h>
#include "attach_choice.h"
#include "split_load.h"

struct btf;
struct bpf_cost;

/* The most attach points a tool's table has. */
#define ENGINE_MAX_POINTS 20

/* What a tool's setup decides of one attach point. */
struct engine_point {
	bool load;		/* its program loads */
	/* Who cannot do without it ("pagetrace", "--used", "it"): its lack is
	 * said and fails the load; NULL: optional. */
	const char *needed_by;
};

/* One configuration the verifier sees differently: one budget row a program. */
struct engine_config {
	const char *tool;	/* the rows' TOOL */
	const char *name;	/* their CONFIG */
	const void *arg;	/* the tool's settings, for its setup */
	/* The unrolled walk: measured only where the kernel lacks bpf_loop,
	 * the one kernel the loader picks it on. */
	bool unrolled;
};

enum engine_flavour { ENGINE_AUTO, ENGINE_TP_BTF, ENGINE_RAW_TP };

struct engine {
	/* The table, the tool's. */
	const char *tool;		/* messages */
	const struct split_ops *ops;	/* its skeleton */
	const void *(*elf_bytes)(size_t *size);
	int nr_points;			/* <= ENGINE_MAX_POINTS */
	/* Its attach points, @nr_points rows of @skel's programs, into @c. */
	void (*describe)(void *skel, struct attach_choice *c);
	/* Once each point's attachment is found (@c): which load for @arg and who needs them, into @p. */
	void (*select)(void *skel, const struct attach_choice *c, struct engine_point *p,
		       const void *arg);
	/* Once every needed point is there: the rodata and map sizes for @arg. 0, or -ENOENT
	 * when the kernel cannot run it (said). */
	int (*configure)(void *skel, const struct btf *vmlinux, const void *arg);
	/* The settings of a load, the tool's. */
	bool btf_option;		/* the tool takes --btf */
	const char *btf_path;		/* --btf, or NULL: the kernel's */
	bool verbose;			/* libbpf's messages, how each point attaches */
	bool explain;			/* -v of trace: CO-RE BTF, each program's verification time */
	bool may_split;			/* the programs may load in two halves (split_load.h) */
	/* The loader's. */
	struct split programs;		/* the loaded programs */
	const char *flavour;		/* "tp_btf" or "raw_tp", once loaded */
	const char *budget_tool, *budget_config;	/* --budget: the row's; NULL: not measuring */
	/* The rows whose program the loader attaches itself (attach_choice_by_loader). */
	struct {
		const char *program;	/* its name (the main skeleton's string) */
		const char *tracepoint;
		struct bpf_link *link;	/* once attached; destroyed at unload */
	} by_loader[ENGINE_MAX_POINTS];
	int nr_by_loader;
	int budget_over;
};

/*
 * A tool's table from its skeleton PREFIX_bpf (PREFIX.skel.h), in its .c:
 * ENGINE_SKELETON(PREFIX, N, rows...) defines the skeleton's functions and
 * its N attach points, rows of attach_choice.h made from the skeleton's
 * programs `p`; ENGINE_OF(PREFIX) fills them into a struct engine.
 */
#define ENGINE_SKELETON(prefix, n, ...) \
	static void *prefix##_open_skeleton(const struct bpf_object_open_opts *o) \
	{ return prefix##_bpf__open_opts(o); } \
	static struct bpf_object_skeleton *prefix##_skeleton_of(void *skel) \
	{ return ((struct prefix##_bpf *)skel)->skeleton; } \
	static void prefix##_destroy_skeleton(void *skel) { prefix##_bpf__destroy(skel); } \
	static const void *prefix##_elf_bytes(size_t *size) { return prefix##_bpf__elf_bytes(size); } \
	static const struct split_ops prefix##_split_ops = { prefix##_open_skeleton, \
		prefix##_skeleton_of, prefix##_destroy_skeleton }; \
	enum { prefix##_points = n }; \
	static void prefix##_describe(void *skel, struct attach_choice *c) \
	{ \
		__typeof__(((struct prefix##_bpf *)skel)->progs) *p = \
			&((struct prefix##_bpf *)skel)->progs; \
		struct attach_choice table[n] = { __VA_ARGS__ }; \
		memcpy(c, table, sizeof(table)); \
	}
#define ENGINE_OF(prefix) \
	.ops = &prefix##_split_ops, .elf_bytes = prefix##_elf_bytes, \
	.nr_points = prefix##_points, .describe = prefix##_describe, \
	.programs = { .ops = &prefix##_split_ops }

/* libbpf's print callback for the tools: every message noted for a refusal
 * (load_failure_note), printed with @e's verbose. */
void engine_print_to(const struct engine *e);

/*
 * Load @e's programs for @arg, as @flavour asks (auto: tp_btf, else raw_tp
 * when the kernel refuses tp_btf); never attached. The skeleton, or NULL
 * with the reason said.
 */
void *engine_load(struct engine *e, const void *arg, enum engine_flavour flavour);
/* Attach the loaded programs: 0 or the error (not said). */
int engine_attach(struct engine *e);
/* Their run time so far (bpf_cost.h). */
void engine_cost(struct engine *e, struct bpf_cost *cost);
/* Detach and close them (NULL: nothing loaded). */
void engine_unload(struct engine *e);
/*
 * --budget: load (never attach) each of the @n @configs with tp_btf, then
 * with raw_tp, one row a program on stdout; a configuration this kernel
 * cannot load is said and skipped. Returns the exit status.
 */
int engine_budget(struct engine *e, const struct engine_config *configs, int n);

#endif /* PAGETRACE_ENGINE_LOAD_H */
