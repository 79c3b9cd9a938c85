/* SPDX-License-Identifier: GPL-2.0 */
/* paths.c: escaping, the mount table and the table of files seen. */
#ifndef PAGETRACE_PATHS_H
#define PAGETRACE_PATHS_H

#include <stdbool.h>
#include <stdio.h>
#include <linux/types.h>
#include "file_path.h"

/* Escape as docs/trace-format.md says: \ooo for space, controls, DEL, backslash. */
void write_escaped(FILE *out, const char *text);
/* The same, into a new string (NULL when out of memory). */
char *escaped_string(const char *raw);

/* The mount table, read again when a device is not found in it. */
int load_mounts(void);
void free_mounts(void);

/* The printable path of a path event; NULL when out of memory. */
char *resolve_path(const struct path_event *e);
/* //unknown/MAJ:MIN/INO */
char *unknown_path(const struct file_id *id);

struct known_file {
	struct file_id id;
	char *path;		/* escaped, ready to print */
	bool used;		/* the tool's own mark (trace: has a read record) */
};

struct file_table {
	struct known_file *slots;
	size_t capacity, count;
	size_t files_read;	/* trace: distinct files that had a page recorded */
};

extern struct file_table files;

/* Remember @path (taken over) for @id. */
void remember_file(const struct file_id *id, char *path);
/* The entry of @id, made //unknown/... if its name never came; NULL when out of memory. */
struct known_file *known_file(const struct file_id *id);
struct known_file *file_slot(const struct file_id *id);
/* The entry of block device @dev (file id {dev, 0, 0}): its node, /dev/NAME. */
struct known_file *known_device(__u32 dev);

#endif /* PAGETRACE_PATHS_H */
