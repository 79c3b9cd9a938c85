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
#include "linked_size.h"
#include "split_load.h"

bool split_load_wanted(void)
{
	const char *knob = getenv("PAGETRACE_SPLIT_LOAD");

	return sysconf(_SC_NPROCESSORS_ONLN) >= 2 && !(knob && !strcmp(knob, "0"));
}

/* The largest first; equal sizes by name, so that every run splits alike. */
static int larger_first(const void *a, const void *b)
{
	const struct split_share *x = a, *y = b;

	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return strcmp(x->name, y->name);
}

/*
 * The programs @maps would load, into @sp->shares with their linked sizes
 * (their own sizes where the ELF @elf of @size bytes cannot be read): 0, or
 * -ENOMEM.
 */
static int programs_to_share(struct split *sp, struct bpf_object *maps, const void *elf,
			     size_t size)
{
	struct linked_sizes *ls = linked_sizes_open(elf, size);
	struct bpf_program *prog;
	long n = 0;

	bpf_object__for_each_program(prog, maps)
		n++;
	sp->shares = calloc(n ? n : 1, sizeof(*sp->shares));
	if (!sp->shares) {
		linked_sizes_close(ls);
		return -ENOMEM;
	}
	bpf_object__for_each_program(prog, maps) {
		struct split_share *share = &sp->shares[sp->nr_shares];

		if (!bpf_program__autoload(prog))
			continue;
		share->name = bpf_program__name(prog);
		share->size = ls ? linked_size(ls, share->name) : 0;
		if (!share->size)
			share->size = bpf_program__insn_cnt(prog);
		sp->nr_shares++;
	}
	linked_sizes_close(ls);
	return 0;
}

/*
 * Each part is to load about half of what the verifier will check of the
 * programs @main would load; @main none. Greedy, the largest first: each
 * program goes to the part lighter so far.
 */
static int split_share(struct split *sp, const struct bpf_object_skeleton *main,
		       struct bpf_object *parts[2])
{
	struct bpf_object *maps = *main->obj;
	struct bpf_program *prog;
	size_t weights[2] = {};
	int err = programs_to_share(sp, maps, main->data, main->data_sz);

	if (err)
		return err;
	qsort(sp->shares, sp->nr_shares, sizeof(*sp->shares), larger_first);
	for (int i = 0; i < 2; i++)
		bpf_object__for_each_program(prog, parts[i])
			bpf_program__set_autoload(prog, false);
	for (long i = 0; i < sp->nr_shares; i++) {
		struct split_share *share = &sp->shares[i];

		share->part = weights[1] < weights[0];
		weights[share->part] += share->size;
		bpf_program__set_autoload(bpf_object__find_program_by_name(parts[share->part],
									   share->name), true);
	}
	bpf_object__for_each_program(prog, maps)
		bpf_program__set_autoload(prog, false);
	return 0;
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

/*
 * The kernel's BTF read into @obj now, as libbpf reads it for its first
 * program that attaches by BTF: the load, finding it read, reads it no more.
 * A failure here leaves it to the load.
 */
static void read_kernel_btf(struct bpf_object *obj)
{
	struct bpf_program *prog;

	bpf_object__for_each_program(prog, obj) {
		const char *sec = bpf_program__section_name(prog);

		if (!strncmp(sec, "tp_btf/", strlen("tp_btf/"))) {
			bpf_program__set_attach_target(prog, 0, sec + strlen("tp_btf/"));
			return;
		}
	}
}

/* The two parts opened, with the kernel's BTF: 0, or -errno. */
static long open_parts(struct split *sp, const struct bpf_object_open_opts *opts)
{
	for (int i = 0; i < 2; i++) {
		sp->part[i] = sp->ops->open(opts);
		if (!sp->part[i])
			return -errno;
		read_kernel_btf(*sp->ops->skeleton(sp->part[i])->obj);
	}
	return 0;
}

static void *open_in_thread(void *sp)
{
	return (void *)open_parts(sp, ((struct split *)sp)->opts);
}

/*
 * One malloc arena: what a second thread allocates and frees goes back to
 * the main heap. In an arena of its own it stayed resident for the
 * process's life (11 MiB in the cache tools).
 */
static void one_arena(void)
{
	mallopt(M_ARENA_MAX, 1);
}

int split_open(struct split *sp, const struct bpf_object_open_opts *opts)
{
	int err;

	one_arena();
	sp->opts = opts;
	err = pthread_create(&sp->opener, NULL, open_in_thread, sp);
	sp->opening = !err;
	return -err;
}

/* split_open()'s thread done: what it returned, or 0 if none ran. */
static long join_opener(struct split *sp)
{
	void *result = NULL;

	if (sp->opening)
		pthread_join(sp->opener, &result);
	sp->opening = false;
	return (long)result;
}

/* The parts opened: by split_open()'s thread, else now. 0, or -errno. */
static long parts_opened(struct split *sp, const struct bpf_object_open_opts *opts)
{
	return sp->opening ? join_opener(sp) : open_parts(sp, opts);
}

/* @sp->main's maps, then its programs shared between two parts loaded at once. */
static int load_parts(struct split *sp, const struct bpf_object_open_opts *opts, bool times)
{
	struct bpf_object_skeleton *main = sp->ops->skeleton(sp->main), *parts[2];
	struct bpf_object *objs[2];
	pthread_t thread;
	void *result;
	int err = parts_opened(sp, opts);

	if (err)
		return err;
	for (int i = 0; i < 2; i++) {
		parts[i] = sp->ops->skeleton(sp->part[i]);
		objs[i] = *parts[i]->obj;
	}
	err = split_share(sp, main, objs);
	for (int i = 0; i < 2 && !err; i++)
		if (times && budget_prepare_more(objs[i]))
			err = -ENOENT;
	if (!err)
		err = bpf_object__load_skeleton(main);
	for (int i = 0; i < 2 && !err; i++)
		err = reuse_maps(*main->obj, objs[i]);
	if (err)
		return err;
	one_arena();
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

void split_print(const struct split *sp, FILE *f, const char *tool)
{
	for (long i = 0; i < sp->nr_shares; i++) {
		const struct split_share *share = &sp->shares[i];
		struct bpf_object *part = *sp->ops->skeleton(sp->part[share->part])->obj;
		struct bpf_program *prog = bpf_object__find_program_by_name(part, share->name);

		fprintf(f, "%s: load: half %d: %s, %zu instructions linked (foreseen %zu)\n", tool,
			share->part + 1, share->name, prog ? bpf_program__insn_cnt(prog) : 0,
			share->size);
	}
}

void split_destroy(struct split *sp)
{
	join_opener(sp);
	free(sp->shares);
	sp->shares = NULL;
	sp->nr_shares = 0;
	for (int i = 0; i < 2; i++) {
		if (sp->part[i])
			sp->ops->destroy(sp->part[i]);
		sp->part[i] = NULL;
	}
	if (sp->main)
		sp->ops->destroy(sp->main);
	sp->main = NULL;
}
