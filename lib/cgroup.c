// SPDX-License-Identifier: GPL-2.0
/*
 * Resolving --cgroup PATH to what the kernel side compares a task's cgroup
 * with: the cgroup's id, its level, and which hierarchy (the unified one,
 * or a v1 hierarchy through one of its controllers). A cgroup's id is its
 * kernfs node id, which is the inode number of its directory on 64-bit
 * machines; its level is the depth of the directory below the hierarchy's
 * root, which mountinfo's root field gives for a mount of a subtree.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include "array.h"
#include "cgroup.h"
#include "errmsg.h"
#include "mountinfo.h"

struct mount_match {
	const char *path;
	dev_t dev;
	size_t best;		/* length of the longest mount point matched */
	char root[PATH_MAX];	/* that mount's root in its hierarchy */
	char point[PATH_MAX];
	char options[1024];
	bool v2;
};

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (!strcmp(dir, "/"))
		return true;
	return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

static int match_mount(const struct mount_entry *m, void *arg)
{
	struct mount_match *match = arg;
	size_t n = strlen(m->point);
	bool v2 = !strcmp(m->fstype, "cgroup2");

	if (!v2 && strcmp(m->fstype, "cgroup"))
		return 0;
	if (match->path && (m->dev != match->dev || !under(match->path, m->point) || n < match->best))
		return 0;
	if (!match->path && (!v2 || strcmp(m->root, "/")))
		return 0;	/* looking for the whole cgroup2 hierarchy */
	match->best = n;
	match->v2 = v2;
	snprintf(match->root, sizeof(match->root), "%s", m->root);
	snprintf(match->point, sizeof(match->point), "%s", m->point);
	snprintf(match->options, sizeof(match->options), "%s", m->options);
	return 0;
}

/* The number of components of "ROOT/REST". */
static __u32 depth(const char *root, const char *rest)
{
	__u32 n = 0;

	for (const char *parts[2] = { root, rest }, **p = parts; p < parts + 2; p++)
		for (const char *c = *p; *c; c++)
			if (*c != '/' && (c == *p || c[-1] == '/'))
				n++;
	return n;
}

/* A v1 hierarchy's controller: the first of its mount options that
 * /proc/cgroups names; its line there (after the heading) is its id. */
static int controller_id(const char *options)
{
	char name[64], copy[1024], *save, *opt;
	FILE *file = fopen("/proc/cgroups", "re");
	int id = -1;

	if (!file)
		return -1;
	snprintf(copy, sizeof(copy), "%s", options);
	for (opt = strtok_r(copy, ",", &save); opt && id < 0; opt = strtok_r(NULL, ",", &save)) {
		rewind(file);
		for (int line = -1; id < 0 && fscanf(file, "%63s%*[^\n]", name) == 1; line++)
			if (line >= 0 && !strcmp(name, opt))
				id = line;
	}
	fclose(file);
	return id;
}

/* A path inside the cgroup2 hierarchy ("/a/b"), as /proc/PID/cgroup says it. */
static bool in_unified(const char *path, char *out, size_t size)
{
	struct mount_match match = {};
	struct stat st;

	if (path[0] != '/' || for_each_mount(match_mount, &match) < 0 || !match.best)
		return false;
	snprintf(out, size, "%s%s", match.point, path);
	return !stat(out, &st) && S_ISDIR(st.st_mode);
}

static int fail(const char *path, const char *why)
{
	char what[PATH_MAX + 16];

	snprintf(what, sizeof(what), "cgroup %s", path);
	errmsg(what, "%s", why);
	return -1;
}

int cgroup_target_resolve(const char *path, struct cgroup_target *t)
{
	struct mount_match match = {};
	char alt[PATH_MAX];
	struct statfs fs;
	struct stat st;

	if (!realpath(path, t->path)) {
		int err = errno;

		if (!in_unified(path, alt, sizeof(alt)) || !realpath(alt, t->path))
			return fail(path, errmsg_strerror(err));
	}
	if (statfs(t->path, &fs) || (fs.f_type != CGROUP2_SUPER_MAGIC && fs.f_type != CGROUP_SUPER_MAGIC)) {
		if (in_unified(path, alt, sizeof(alt)) && strcmp(alt, t->path))
			return cgroup_target_resolve(alt, t);
		return fail(path, "not a cgroup directory (nor a cgroup of the cgroup2 hierarchy)");
	}
	if (stat(t->path, &st) || !S_ISDIR(st.st_mode))
		return fail(path, "not a cgroup directory");
	match.path = t->path;
	match.dev = st.st_dev;
	if (for_each_mount(match_mount, &match) < 0 || !match.best)
		return fail(path, "its mount is not in /proc/self/mountinfo");
	t->id = st.st_ino;
	t->level = depth(match.root, t->path + (strcmp(match.point, "/") ? strlen(match.point) : 0));
	t->subsys = match.v2 ? -1 : controller_id(match.options);
	if (!match.v2 && t->subsys < 0)
		return fail(path, "a v1 hierarchy without a controller (such as name=systemd): "
			    "give the cgroup in the cgroup2 hierarchy or in a hierarchy with a controller");
	return 0;
}

bool cgroup_target_exists(const struct cgroup_target *t)
{
	struct stat st;

	return !stat(t->path, &st) && st.st_ino == t->id;
}

static struct {
	__u64 id;
	char found[PATH_MAX];
} wanted;

static int match_id(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type != FTW_D || st->st_ino != wanted.id)
		return 0;
	snprintf(wanted.found, sizeof(wanted.found), "%s", path);
	return 1;
}

bool cgroup_path_of_id(__u64 id, char *path, size_t size)
{
	struct mount_match match = {};	/* .path NULL: the whole cgroup2 hierarchy */
	size_t n;

	if (for_each_mount(match_mount, &match) < 0 || !match.best)
		return false;
	n = strcmp(match.point, "/") ? strlen(match.point) : 0;
	wanted.id = id;
	wanted.found[0] = '\0';
	if (nftw(match.point, match_id, 16, FTW_PHYS | FTW_MOUNT) != 1)
		return false;
	snprintf(path, size, "%s", wanted.found[n] ? wanted.found + n : "/");
	return true;
}

static struct {
	__u64 *ids;
	size_t n, cap;
} live;

static int add_live(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (type != FTW_D)
		return 0;
	if (array_reserve(&live.ids, &live.cap, live.n + 1,
			  sizeof(*live.ids)) < 0)
		return -1;
	live.ids[live.n++] = st->st_ino;
	return 0;
}

static int compare_ids(const void *a, const void *b)
{
	__u64 x = *(const __u64 *)a, y = *(const __u64 *)b;

	return x < y ? -1 : x > y;
}

long cgroup_live_ids(__u64 **ids)
{
	struct mount_match match = {};	/* .path NULL: the whole cgroup2 hierarchy */
	int walked;

	*ids = NULL;
	if (for_each_mount(match_mount, &match) < 0 || !match.best)
		return -1;
	live.ids = NULL;
	live.n = live.cap = 0;
	walked = nftw(match.point, add_live, 16, FTW_PHYS | FTW_MOUNT);
	if (walked) {
		free(live.ids);
		return -1;
	}
	qsort(live.ids, live.n, sizeof(*live.ids), compare_ids);
	*ids = live.ids;
	return (long)live.n;
}

bool cgroup_id_in(const __u64 *ids, long n, __u64 id)
{
	return n > 0 && bsearch(&id, ids, n, sizeof(*ids), compare_ids) != NULL;
}
