// SPDX-License-Identifier: GPL-2.0
/*
 * split_load: one object's programs loaded by two threads (split_load.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "bpf_budget.h"
#include "split_load.h"

bool split_load_wanted(void)
{
	const char *knob = getenv("PAGETRACE_SPLIT_LOAD");

	return sysconf(_SC_NPROCESSORS_ONLN) >= 2 && !(knob && !strcmp(knob, "0"));
}

/* Which part loads @prog of @maps: 0 or 1, or -1 for none; in *@weights, the parts' instructions. */
static int part_of(struct bpf_object *maps, const struct bpf_program *prog, size_t weights[2])
{
	struct bpf_program *p;
	size_t mine = bpf_program__insn_cnt(prog);
	int part;

	if (!bpf_program__autoload(prog))
		return -1;
	/* Greedy, the largest first: the program goes to the lighter part when its turn comes. */
	weights[0] = weights[1] = 0;
	bpf_object__for_each_program(p, maps) {
		size_t theirs = bpf_program__insn_cnt(p);

		if (p == prog || !bpf_program__autoload(p) || theirs < mine ||
		    (theirs == mine && strcmp(bpf_program__name(p), bpf_program__name(prog)) > 0))
			continue;
		part = weights[1] < weights[0];
		weights[part] += theirs;
	}
	return weights[1] < weights[0];
}

/* Each part is to load about half of the programs @maps would; @maps none. */
static void split_share(struct bpf_object *maps, struct bpf_object *parts[2])
{
	struct bpf_program *prog;
	size_t weights[2];

	for (int i = 0; i < 2; i++)
		bpf_object__for_each_program(prog, parts[i])
			bpf_program__set_autoload(prog, false);
	bpf_object__for_each_program(prog, maps) {
		int part = part_of(maps, prog, weights);

		if (part >= 0)
			bpf_program__set_autoload(
				bpf_object__find_program_by_name(parts[part], bpf_program__name(prog)),
				true);
	}
	bpf_object__for_each_program(prog, maps)
		bpf_program__set_autoload(prog, false);
}

/* Every map of @part is @maps' map of the same name. */
static int reuse_maps(struct bpf_object *maps, struct bpf_object *part)
{
	struct bpf_map *map;

	bpf_object__for_each_map(map, part) {
		struct bpf_map *theirs = bpf_object__find_map_by_name(maps, bpf_map__name(map));
		int err = theirs ? bpf_map__reuse_fd(map, bpf_map__fd(theirs)) : -ENOENT;

		if (err)
			return err;
	}
	return 0;
}

static void *load_in_thread(void *skeleton)
{
	return (void *)(long)bpf_object__load_skeleton(skeleton);
}

/* @sp->main's maps, then its programs shared between two parts loaded at once. */
static int load_parts(struct split *sp, const struct bpf_object_open_opts *opts, bool times)
{
	struct bpf_object_skeleton *main = sp->ops->skeleton(sp->main), *parts[2];
	struct bpf_object *objs[2];
	pthread_t thread;
	void *result;
	int err;

	for (int i = 0; i < 2; i++) {
		sp->part[i] = sp->ops->open(opts);
		if (!sp->part[i])
			return -errno;
		parts[i] = sp->ops->skeleton(sp->part[i]);
		objs[i] = *parts[i]->obj;
	}
	split_share(*main->obj, objs);
	for (int i = 0; i < 2; i++)
		if (times && budget_prepare_more(objs[i]))
			return -ENOENT;
	err = bpf_object__load_skeleton(main);
	for (int i = 0; i < 2 && !err; i++)
		err = reuse_maps(*main->obj, objs[i]);
	if (err)
		return err;
	/* One malloc arena: what the second thread allocates and frees goes
	 * back to the main heap. In an arena of its own it stayed resident for
	 * the process's life (11 MiB in the cache tools). */
	mallopt(M_ARENA_MAX, 1);
	err = pthread_create(&thread, NULL, load_in_thread, parts[1]);
	if (err)
		return -err;
	err = bpf_object__load_skeleton(parts[0]);
	pthread_join(thread, &result);
	malloc_trim(0);
	return err ? err : (int)(long)result;
}

int split_load(struct split *sp, const struct bpf_object_open_opts *opts, bool split, bool times)
{
	struct bpf_object_skeleton *main = sp->ops->skeleton(sp->main);

	if (!split) {
		if (times && budget_prepare_more(*main->obj))
			return -ENOENT;
		return bpf_object__load_skeleton(main);
	}
	return load_parts(sp, opts, times);
}

int split_objects(const struct split *sp, struct bpf_object **objs)
{
	if (!sp->part[0]) {
		objs[0] = *sp->ops->skeleton(sp->main)->obj;
		return 1;
	}
	for (int i = 0; i < 2; i++)
		objs[i] = *sp->ops->skeleton(sp->part[i])->obj;
	return 2;
}

int split_attach(struct split *sp)
{
	int err = 0;

	if (!sp->part[0])
		return bpf_object__attach_skeleton(sp->ops->skeleton(sp->main));
	for (int i = 0; i < 2 && !err; i++)
		err = bpf_object__attach_skeleton(sp->ops->skeleton(sp->part[i]));
	return err;
}

void split_destroy(struct split *sp)
{
	for (int i = 0; i < 2; i++) {
		if (sp->part[i])
			sp->ops->destroy(sp->part[i]);
		sp->part[i] = NULL;
	}
	if (sp->main)
		sp->ops->destroy(sp->main);
	sp->main = NULL;
}
