/* Whether the devices of the files to prefetch answer requests cheaply:
 * no blk-throttle read-IOPS cap on this process's cgroup, and no seek
 * (the pack's request-us below SEEK_US, or, not measured, a disk that
 * does not say it is rotational). Only then is the prefetch beside the
 * start in first-access order the right one; otherwise the Python planner
 * models the device and chooses (a sorted prefetch before the start, or
 * none: docs/lab/case-study-firefox.md, "On slower storage"). Anything
 * this file cannot tell (a cgroup hierarchy away from its usual place) also goes to
 * the planner. */
#include "launch.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define V1_BLKIO "/sys/fs/cgroup/blkio"
#define V2_ROOT "/sys/fs/cgroup"

static long read_long(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* The whole disk (MAJ:MIN) of a partition, or the device itself. */
static void whole_disk(unsigned major, unsigned minor, char *disk, size_t len)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(disk, len, "%u:%u", major, minor);
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/partition", major, minor);
	if (access(path, F_OK) != 0)
		return;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/../dev", major, minor);
	f = fopen(path, "re");
	if (f) {
		unsigned a, b;

		if (fscanf(f, "%u:%u", &a, &b) == 2)
			snprintf(disk, len, "%u:%u", a, b);
		fclose(f);
	}
}

/* This process's cgroup path in the hierarchy (v1: blkio, v2: unified);
 * 0, or -1 when there is none to read. */
static int own_cgroup(int v2, char *path, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096];
	int found = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *controllers = strchr(line, ':'), *where;

		if (!controllers || !(where = strchr(controllers + 1, ':')))
			continue;
		*where++ = '\0';
		controllers++;
		where[strcspn(where, "\n")] = '\0';
		if (v2 ? *controllers == '\0' : strstr(controllers, "blkio") != NULL) {
			snprintf(path, len, "%s", where);
			found = 0;
		}
	}
	fclose(f);
	return found;
}

/* 1 when FILE (blkio.throttle.read_iops_device or io.max) limits DISK's
 * read requests. */
static int caps_reads(const char *file, const char *disk, int v2)
{
	FILE *f = fopen(file, "re");
	char line[512];
	size_t n = strlen(disk);
	int capped = 0;

	if (!f)
		return 0;
	while (!capped && fgets(line, sizeof(line), f)) {
		const char *riops;

		if (strncmp(line, disk, n) || line[n] != ' ')
			continue;
		if (!v2)
			capped = line[n + 1] >= '1' && line[n + 1] <= '9';
		else if ((riops = strstr(line, " riops=")))
			capped = riops[7] >= '0' && riops[7] <= '9';
	}
	fclose(f);
	return capped;
}

/* 1 capped, 0 not, -1 cannot tell. */
static int read_iops_capped(const char *disk)
{
	char own[2048], dir[PATH_MAX + 64], file[PATH_MAX + 128];
	int v2;

	if (access(V1_BLKIO "/blkio.throttle.read_iops_device", F_OK) == 0)
		v2 = 0;
	else if (access(V2_ROOT "/cgroup.controllers", F_OK) == 0)
		v2 = 1;
	else
		return -1;
	if (own_cgroup(v2, own, sizeof(own)) != 0)
		return 0; /* in no cgroup of the hierarchy: nothing limits it */
	/* The cgroup and each ancestor: the smallest limit wins, any is one. */
	for (;;) {
		snprintf(dir, sizeof(dir), "%s%s", v2 ? V2_ROOT : V1_BLKIO,
			 strcmp(own, "/") ? own : "");
		snprintf(file, sizeof(file), "%s/%s", dir,
			 v2 ? "io.max" : "blkio.throttle.read_iops_device");
		if (caps_reads(file, disk, v2))
			return 1;
		char *slash = strrchr(own, '/');

		if (!slash || (slash == own && own[1] == '\0'))
			return 0;
		if (slash == own)
			own[1] = '\0';
		else
			*slash = '\0';
	}
}

static const struct pack_request_us *measured(const struct pack *pack,
					      const struct pack_file *f)
{
	for (size_t i = 0; i < pack->n_request_us; i++)
		if (pack->request_us[i].major == f->major &&
		    pack->request_us[i].minor == f->minor)
			return &pack->request_us[i];
	return NULL;
}

/* 1 cheap, 0 not, -1 cannot tell; the clause for WHY into OUT. */
static int device_cheap(const struct pack *pack, const struct pack_file *f,
			FILE *out)
{
	const struct pack_request_us *us = measured(pack, f);
	char disk[32], path[PATH_MAX];
	int capped;

	whole_disk(f->major, f->minor, disk, sizeof(disk));
	capped = read_iops_capped(disk);
	if (capped != 0)
		return capped < 0 ? -1 : 0;
	if (us) {
		fprintf(out, "%u:%u: %llu us a random read", f->major, f->minor,
			(unsigned long long)us->us);
		return us->us < SEEK_US;
	}
	snprintf(path, sizeof(path), "/sys/dev/block/%s/queue/rotational", disk);
	fprintf(out, "%u:%u: not rotational", f->major, f->minor);
	return read_long(path) != 1;
}

/* "MAJ:MIN" of F's device. */
static void dev_text(const struct pack_file *f, char *text, size_t len)
{
	snprintf(text, len, "%u:%u", f->major, f->minor);
}

static int dev_cmp(const void *a, const void *b)
{
	char x[24], y[24];

	dev_text(*(const struct pack_file *const *)a, x, sizeof(x));
	dev_text(*(const struct pack_file *const *)b, y, sizeof(y));
	return strcmp(x, y);
}

/* The devices of the kept files, each as one of its files, sorted as
 * "MAJ:MIN" text (the planner's order). */
int cheap_devices(const struct pack *pack, const struct skipped *s, char **why)
{
	const struct pack_file **devs = calloc(pack->n_files + 1, sizeof(*devs));
	size_t n = 0, size = 0;
	int cheap = 1;
	FILE *out;

	*why = NULL;
	if (!devs || !(out = open_memstream(why, &size))) {
		free(devs);
		return 0;
	}
	for (size_t i = 0; i < pack->n_files; i++) {
		const struct pack_file *f = &pack->files[i];
		size_t k;

		if (s->reason[i])
			continue;
		for (k = 0; k < n && (devs[k]->major != f->major ||
				      devs[k]->minor != f->minor); k++)
			;
		if (k == n)
			devs[n++] = f;
	}
	qsort(devs, n, sizeof(*devs), dev_cmp);
	fputs("requests are cheap (", out);
	for (size_t k = 0; k < n && cheap == 1; k++) {
		if (k)
			fputs(", ", out);
		cheap = device_cheap(pack, devs[k], out);
	}
	fputs("; no read-IOPS cap)", out);
	fclose(out);
	free(devs);
	return cheap == 1;
}
