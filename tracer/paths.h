/* SPDX-License-Identifier: GPL-2.0 */
/* paths.c: the mount table and the table of files seen. */
#ifndef PAGETRACE_PATHS_H
#define PAGETRACE_PATHS_H

#include <stdbool.h>
#include <stdio.h>
#include <linux/types.h>
#include "file_path.h"

/* Escaping (docs/trace-format.md) is lib/escape.h's: escape_puts(). */
#include "escape.h"

/* The mount table, read again when a device is not found in it. */
int load_mounts(void);
void free_mounts(void);

/* --paths container: host directories (each DIRS[i].host) shown at another
 * path (DIRS[i].inside, "" for the root); the deepest one matching wins. */
#include "container.h"
void set_path_views(const struct container_dir *dirs, int count);

/* The printable path of a path event; NULL when out of memory. */
char *resolve_path(const struct path_event *e);
/* //unknown/MAJ:MIN/INO */
char *unknown_path(const struct file_id *id);

struct known_file {
	struct file_id id;
	char *path;		/* escaped, ready to print */
	bool used;		/* the tool's own mark (trace: has a read record) */
	bool recent;		/* looked up since the last forget_stale_files() */
};

struct file_table {
	struct known_file *slots;
	size_t capacity, count;
	size_t files_read;	/* trace: distinct files that had a page recorded */
	size_t forget_at;	/* forget_stale_files() works once count reaches it */
	unsigned long long forgotten;	/* names dropped (sent again when needed) */
	/* ids of files forgotten after they had a read record, so that files_read
	 * counts each once: 16 bytes a file instead of its whole entry */
	struct file_id *counted;
	size_t counted_capacity, counted_count;
};

extern struct file_table files;

/* Remember @path (taken over) for @id. */
void remember_file(const struct file_id *id, char *path);
/* The entry of @id, made //unknown/... if its name never came; NULL when out of memory. */
struct known_file *known_file(const struct file_id *id);
struct known_file *file_slot(const struct file_id *id);
/* The entry of block device @dev (file id {dev, 0, 0}): its node, /dev/NAME. */
struct known_file *known_device(__u32 dev);
/* Mark @slot as having a read record; true the first time for its file. */
bool first_read_of(struct known_file *slot);

/*
 * Bound the table on long runs: once it holds files_kept names or more,
 * forget those not looked up since the last call. For each, forget(id) must
 * make the kernel send its name again before its next record (delete it from
 * named_files); drain() then consumes what is already queued, which may
 * still name them; only then are they freed. Returns how many were forgotten.
 */
extern size_t files_kept;	/* default 65536, as many as the kernel's named_files */
size_t forget_stale_files(void (*forget)(const struct file_id *id, void *ctx),
			  void (*drain)(void *ctx), void *ctx);

#endif /* PAGETRACE_PATHS_H */
