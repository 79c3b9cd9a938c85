// SPDX-License-Identifier: GPL-2.0
/*
 * paths: from what the kernel side sends about a file (struct path_event,
 * file_path.bpf.h) to the path a trace prints. Owns the escaping of
 * docs/trace-format.md, the mount table (/proc/self/mountinfo) that turns a
 * path inside a filesystem into a path on this system, and the table of
 * files seen so far (file_id -> escaped path). Used by trace and cachetop.
 * The escaping and the mountinfo parser are lib/'s (escape.c, mountinfo.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include "array.h"
#include "errmsg.h"
#include "escape.h"
#include "mountinfo.h"
#include "paths.h"

/* ------------------------------------------------------------------ */
/* Path escaping and the mount table                                  */

struct known_mount {
	unsigned int major, minor;
	char *root;		/* the filesystem directory mounted here */
	char *mount_point;
};

static struct mount_table {
	struct known_mount *entries;
	size_t count, capacity;
} mounts;

void free_mounts(void)
{
	for (size_t i = 0; i < mounts.count; i++) {
		free(mounts.entries[i].root);
		free(mounts.entries[i].mount_point);
	}
	free(mounts.entries);
	mounts = (struct mount_table){ 0 };
}

/* for_each_mount() callback: keep M; non-zero (stop) when out of memory. */
static int keep_mount(const struct mount_entry *m, void *arg)
{
	struct known_mount *k;

	(void)arg;
	if (array_reserve(&mounts.entries, &mounts.capacity, mounts.count + 1,
			  sizeof(*mounts.entries)))
		return 1;
	k = &mounts.entries[mounts.count];
	*k = (struct known_mount){ major(m->dev), minor(m->dev),
				   strdup(m->root), strdup(m->point) };
	if (!k->root || !k->mount_point) {
		free(k->root);
		free(k->mount_point);
		return 1;
	}
	mounts.count++;
	return 0;
}

int load_mounts(void)
{
	int ret;

	free_mounts();
	errno = 0;
	ret = for_each_mount(keep_mount, NULL);
	if (ret < 0)
		return errmsg("/proc/self/mountinfo", "%s", errmsg_strerror(errno)), -1;
	if (ret > 0)
		return errmsg(NULL, "out of memory"), -1;
	return 0;
}

/* @rel is relative to the filesystem root; does mount @m show it, and where? */
static bool mount_shows(const struct known_mount *m, const char *rel, const char **rest)
{
	size_t len = strlen(m->root);

	if (!strcmp(m->root, "/")) {
		*rest = rel;
		return true;
	}
	if (strncmp(rel, m->root, len) || (rel[len] != '/' && rel[len] != '\0'))
		return false;
	*rest = rel + len;
	return true;
}

static const struct known_mount *find_mount(unsigned int major, unsigned int minor,
					    const char *rel, const char **rest)
{
	for (size_t i = 0; i < mounts.count; i++) {
		const struct known_mount *m = &mounts.entries[i];

		if (m->major == major && m->minor == minor && mount_shows(m, rel, rest))
			return m;
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Files: id -> printable (already escaped) path                      */

struct file_table files;
size_t files_kept = 65536;

static bool same_file(const struct file_id *a, const struct file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->generation == b->generation;
}

static size_t file_hash(const struct file_id *id)
{
	unsigned long long h = id->ino * 0x9e3779b97f4a7c15ULL;

	h ^= ((unsigned long long)id->dev << 32) ^ id->generation;
	return (size_t)(h ^ (h >> 29));
}

struct known_file *file_slot(const struct file_id *id)
{
	size_t i = file_hash(id) & (files.capacity - 1);

	while (files.slots[i].path && !same_file(&files.slots[i].id, id))
		i = (i + 1) & (files.capacity - 1);
	return &files.slots[i];
}

static int grow_files(void)
{
	struct file_table old = files;

	files.capacity = old.capacity ? old.capacity * 2 : 1024;
	files.slots = calloc(files.capacity, sizeof(*files.slots));
	if (!files.slots)
		return -1;
	for (size_t i = 0; i < old.capacity; i++)
		if (old.slots[i].path)
			*file_slot(&old.slots[i].id) = old.slots[i];
	free(old.slots);
	return 0;
}

void remember_file(const struct file_id *id, char *path)
{
	struct known_file *slot;

	if ((files.count + 1) * 2 > files.capacity && grow_files()) {
		free(path);
		return;
	}
	slot = file_slot(id);
	if (slot->path) {
		free(slot->path);
	} else {
		files.count++;
		slot->id = *id;
	}
	slot->path = path;
	slot->recent = true;
}

/* Join names[] (leaf first) into "/a/b/c", relative to the fs root. */
static void join_components(const struct path_event *e, char *rel, size_t size)
{
	size_t used = 0;

	rel[0] = '\0';
	for (int i = (int)e->depth - 1; i >= 0 && used + 1 < size; i--) {
		int n = snprintf(rel + used, size - used, "/%s", e->names[i]);

		if (n < 0)
			break;
		used += (size_t)n;
	}
	if (used >= size)
		used = size - 1;
	if (!used)
		strcpy(rel, "/");
}

char *unknown_path(const struct file_id *id)
{
	char *text = NULL;

	if (asprintf(&text, "//unknown/%u:%u/%llu", id->dev >> 20, id->dev & 0xfffff,
		     (unsigned long long)id->ino) < 0)
		return NULL;
	return text;
}

static const struct container_dir *views;
static int nviews;

void set_path_views(const struct container_dir *dirs, int count)
{
	views = dirs;
	nviews = count;
}

/* FULL, a host path, as the view that shows it (the deepest) shows it. */
static void apply_view(char *full, size_t size)
{
	const struct container_dir *best = NULL;
	char rest[PATH_MAX];
	size_t best_len = 0;

	for (int i = 0; i < nviews; i++) {
		size_t n = strlen(views[i].host);

		if (n > best_len && !strncmp(full, views[i].host, n) &&
		    (full[n] == '/' || full[n] == '\0')) {
			best = &views[i];
			best_len = n;
		}
	}
	if (!best)
		return;
	snprintf(rest, sizeof(rest), "%s", full + best_len);
	snprintf(full, size, "%s%s", best->inside, rest[0] ? rest : (best->inside[0] ? "" : "/"));
}

char *resolve_path(const struct path_event *e)
{
	unsigned int major = e->file.dev >> 20, minor = e->file.dev & 0xfffff;
	const struct known_mount *m;
	const char *rest;
	char rel[PATH_MAX], full[PATH_MAX + 64], *escaped, *text = NULL;

	if (e->flags & (PATH_TOO_DEEP | PATH_NO_DENTRY))
		return unknown_path(&e->file);
	join_components(e, rel, sizeof(rel));
	m = find_mount(major, minor, rel, &rest);
	if (!m && !load_mounts())	/* mounted after we started? */
		m = find_mount(major, minor, rel, &rest);
	if (!m)
		snprintf(full, sizeof(full), "//dev/%u:%u%s", major, minor, rel);
	else if (!strcmp(m->mount_point, "/"))
		snprintf(full, sizeof(full), "%s", *rest ? rest : "/");
	else
		snprintf(full, sizeof(full), "%s%s", m->mount_point, rest);
	apply_view(full, sizeof(full));
	escaped = escape_string(full);
	if (!escaped)
		return NULL;
	if (!(e->flags & PATH_DELETED))
		return escaped;
	if (asprintf(&text, "//deleted%s", escaped) < 0)
		text = NULL;
	free(escaped);
	return text;
}

/*
 * The node of block device @dev: /dev/ plus the kernel's name for it
 * (DEVNAME in /sys/dev/block/MAJ:MIN/uevent, the name devtmpfs gives it);
 * //unknown/MAJ:MIN/0 when sysfs does not know it.
 */
static char *device_node(__u32 dev)
{
	char where[64], line[256], *text = NULL, *escaped;
	struct file_id id = { .dev = dev };
	FILE *uevent;

	snprintf(where, sizeof(where), "/sys/dev/block/%u:%u/uevent", dev >> 20, dev & 0xfffff);
	uevent = fopen(where, "re");
	while (uevent && fgets(line, sizeof(line), uevent)) {
		if (strncmp(line, "DEVNAME=", 8))
			continue;
		line[strcspn(line, "\n")] = '\0';
		if (asprintf(&text, "/dev/%s", line + 8) < 0)
			text = NULL;
		break;
	}
	if (uevent)
		fclose(uevent);
	if (!text)
		return unknown_path(&id);
	escaped = escape_string(text);
	free(text);
	return escaped;
}

struct known_file *known_device(__u32 dev)
{
	struct file_id id = { .dev = dev };
	struct known_file *slot = files.capacity ? file_slot(&id) : NULL;
	char *node;

	if (slot && slot->path) {
		slot->recent = true;
		return slot;
	}
	node = device_node(dev);
	if (!node)
		return NULL;
	remember_file(&id, node);
	slot = file_slot(&id);
	return slot->path ? slot : NULL;
}

struct known_file *known_file(const struct file_id *id)
{
	struct known_file *slot = files.capacity ? file_slot(id) : NULL;

	if (!slot || !slot->path) {
		char *unknown = unknown_path(id);

		if (!unknown)
			return NULL;
		remember_file(id, unknown);
		slot = file_slot(id);
	}
	slot->recent = true;
	return slot->path ? slot : NULL;
}

/* ------------------------------------------------------------------ */
/* Long runs: forgetting names not used lately                         */

static struct file_id *counted_slot(const struct file_id *id)
{
	size_t i = file_hash(id) & (files.counted_capacity - 1);

	while (files.counted[i].ino && !same_file(&files.counted[i], id))
		i = (i + 1) & (files.counted_capacity - 1);
	return &files.counted[i];
}

/* Remember that @id was counted in files_read; ids with inode 0 (devices) are not. */
static void remember_counted(const struct file_id *id)
{
	struct file_id *old = files.counted;
	size_t old_capacity = files.counted_capacity;

	if (!id->ino)
		return;
	if ((files.counted_count + 1) * 2 > files.counted_capacity) {
		files.counted_capacity = old_capacity ? old_capacity * 2 : 1024;
		files.counted = calloc(files.counted_capacity, sizeof(*files.counted));
		if (!files.counted) {
			files.counted = old;
			files.counted_capacity = old_capacity;
			return;
		}
		for (size_t i = 0; i < old_capacity; i++)
			if (old[i].ino)
				*counted_slot(&old[i]) = old[i];
		free(old);
	}
	if (!counted_slot(id)->ino) {
		*counted_slot(id) = *id;
		files.counted_count++;
	}
}

bool first_read_of(struct known_file *slot)
{
	if (slot->used)
		return false;
	slot->used = true;
	return !files.counted_capacity || !counted_slot(&slot->id)->ino;
}

static bool stale(const struct known_file *slot)
{
	return slot->path && !slot->recent;
}

size_t forget_stale_files(void (*forget)(const struct file_id *id, void *ctx),
			  void (*drain)(void *ctx), void *ctx)
{
	struct file_table old = files;
	size_t dropped = 0;

	if (files.count < (files.forget_at ? files.forget_at : files_kept))
		return 0;
	for (size_t i = 0; i < old.capacity; i++)
		if (stale(&old.slots[i]))
			forget(&old.slots[i].id, ctx);
	/* Queued records may name them: read those while the names are here. */
	drain(ctx);
	old = files;	/* drain() may have added names */
	files.slots = calloc(old.capacity, sizeof(*files.slots));
	if (!files.slots) {
		files.slots = old.slots;
		return 0;
	}
	files.count = 0;
	for (size_t i = 0; i < old.capacity; i++) {
		struct known_file *slot = &old.slots[i];

		if (!slot->path)
			continue;
		if (stale(slot)) {
			if (slot->used)
				remember_counted(&slot->id);
			free(slot->path);
			dropped++;
			continue;
		}
		slot->recent = false;
		*file_slot(&slot->id) = *slot;
		files.count++;
	}
	free(old.slots);
	/* What is left was in use: look again once files_kept more have come. */
	files.forget_at = files.count + files_kept;
	files.forgotten += dropped;
	return dropped;
}

