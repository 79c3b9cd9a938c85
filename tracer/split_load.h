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
 * verifier sees). The halves are balanced by the programs' instruction
 * counts. The programs, and what the verifier makes of them, are those of
 * one load (tests/test_trace_cost.py compares their translations).
 */
#ifndef PAGETRACE_SPLIT_LOAD_H
#define PAGETRACE_SPLIT_LOAD_H

#include <stdbool.h>

struct bpf_object;
struct bpf_object_skeleton;
struct bpf_object_open_opts;

/* A tool's skeleton, seen by type: opened, its bpf_object_skeleton, destroyed. */
struct split_ops {
	void *(*open)(const struct bpf_object_open_opts *opts);
	struct bpf_object_skeleton *(*skeleton)(void *skel);
	void (*destroy)(void *skel);
};

/* A tool's programs: in its skeleton @main, or in two parts of it. */
struct split {
	const struct split_ops *ops;
	void *main;
	void *part[2];		/* NULL: not split */
};

/* Two CPUs or more online, and PAGETRACE_SPLIT_LOAD is not 0 (a test knob: one load). */
bool split_load_wanted(void);
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
/* Attach the loaded programs. */
int split_attach(struct split *sp);
/* Close the parts and @sp->main. */
void split_destroy(struct split *sp);

#endif /* PAGETRACE_SPLIT_LOAD_H */
