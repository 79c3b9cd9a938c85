/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Load one BPF object's programs on two CPUs at once, for trace and the
 * cache tools.
 *
 * The kernel verifies the programs of one load one after the other, in the
 * loading thread; privileged loads of different programs may run at once.
 * The object is opened three times (three skeletons): the first creates
 * every map, loaded with no program; the two others load about half of the
 * programs each, in two threads, every map taken from the first
 * (bpf_map__reuse_fd: the same maps, and the same read-only data that the
 * verifier sees). The halves are balanced by the programs' linked sizes
 * (linked_size.h): what the verifier is given of each. The two parts may
 * be opened early, beside the caller's reading of the kernel's BTF
 * (split_open()). The programs, and what the verifier makes of them, are those of
 * one load (tests/test_trace_cost.py compares their translations).
 */
#ifndef PAGETRACE_SPLIT_LOAD_H
#define PAGETRACE_SPLIT_LOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

struct bpf_object;
struct bpf_object_skeleton;
struct bpf_object_open_opts;

/* A tool's skeleton, seen by type: opened, its bpf_object_skeleton, destroyed. */
struct split_ops {
	void *(*open)(const struct bpf_object_open_opts *opts);
	struct bpf_object_skeleton *(*skeleton)(void *skel);
	void (*destroy)(void *skel);
};

/* A program of a split load: which part loads it, and its linked size. */
struct split_share {
	const char *name;
	size_t size;
	int part;
};

/* A tool's programs: in its skeleton @main, or in two parts of it. */
struct split {
	const struct split_ops *ops;
	void *main;
	void *part[2];		/* NULL: not split */
	pthread_t opener;	/* opening the parts, while @opening */
	bool opening;
	const struct bpf_object_open_opts *opts;	/* the opener's */
	struct split_share *shares;	/* the programs of a split load, the largest first */
	long nr_shares;
};

/* Two CPUs or more online, and PAGETRACE_SPLIT_LOAD is not 0 (a test knob: one load). */
bool split_load_wanted(void);
/*
 * Open @sp's two parts with @opts, which must not change until split_load()
 * or split_destroy(), in a thread of their own, and read the kernel's BTF
 * into each: what each load would read first, now done beside the
 * caller's own work. 0, or -errno (the parts are then opened at the load).
 */
int split_open(struct split *sp, const struct bpf_object_open_opts *opts);
/*
 * Load @sp->main, opened with @opts and set up (rodata, map sizes, which
 * programs load): at once unless @split; else its maps, then its programs
 * in two parts opened with @opts, at once. @times: the verifier's
 * statistics of each program (bpf_budget.h). Returns 0, or the first
 * error (libbpf said why).
 */
int split_load(struct split *sp, const struct bpf_object_open_opts *opts, bool split, bool times);
/* The objects whose programs loaded, into @objs (two at most); how many. */
int split_objects(const struct split *sp, struct bpf_object **objs);
/*
 * Each program of a split load, its half and its instructions as libbpf
 * linked them, beside those foreseen (linked_size.h), one line each on @f.
 */
void split_print(const struct split *sp, FILE *f, const char *tool);
/* Attach the loaded programs. */
int split_attach(struct split *sp);
/* Close the parts and @sp->main. */
void split_destroy(struct split *sp);

#endif /* PAGETRACE_SPLIT_LOAD_H */
