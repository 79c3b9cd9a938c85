/* Replay's side of --throttle: the whole disks under the files it opened,
 * handed to throttle_begin() (throttle.c), and what it reports of the
 * throttle (--json, and the line on stderr). */
#include "replay.h"
#include "escape.h"
#include "throttle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

/* --- replay's side ---------------------------------------------------- */

static int add_disk(dev_t *disks, size_t *n, dev_t disk)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if (disks[i] == disk)
			return 0;
	if (*n == THROTTLE_MAX_DISKS) {
		errmsg("--throttle", "the trace's files are on more than %d "
		       "disks", THROTTLE_MAX_DISKS);
		return -1;
	}
	disks[(*n)++] = disk;
	return 0;
}

int throttle_files(struct replay *r)
{
	dev_t disks[THROTTLE_MAX_DISKS];
	size_t i, n = 0;

	for (i = 0; i < r->n_files; i++) {
		const struct replay_file *f = &r->files[i];
		char *what;
		dev_t disk;
		int failed;

		if (f->state != FILE_OPEN)
			continue;
		what = escape_bytes(f->path, f->path_len);
		failed = throttle_disk_of(f->dev, what ? what : "(path)",
					  &disk) < 0 ||
			 add_disk(disks, &n, disk) < 0;
		free(what);
		if (failed)
			return -1;
	}
	if (n == 0)
		return 0;      /* nothing will be read: nothing to throttle */
	if (throttle_begin(&r->opt.throttle, disks, n) < 0)
		return -1;
	memcpy(r->throttle_disks, disks, n * sizeof(*disks));
	r->n_throttle_disks = n;
	return 0;
}

/* --- what replay reports ---------------------------------------------- */

static void print_optional(const char *key, uint64_t value, int known)
{
	if (known)
		printf(", \"%s\": %llu", key, (unsigned long long)value);
	else
		printf(", \"%s\": null", key);
}

void throttle_print_json(const struct replay *r)
{
	const struct throttle_limits *lim = &r->opt.throttle;
	size_t i;

	if (!lim->riops) {
		fputs("\"throttle\": null", stdout);
		return;
	}
	printf("\"throttle\": {\"riops\": %llu", (unsigned long long)lim->riops);
	print_optional("rbps", lim->rbps, lim->rbps != 0);
	if (lim->profile)
		printf(", \"profile\": \"%s\"", lim->profile);
	else
		fputs(", \"profile\": null", stdout);
	printf(", \"cgroup\": \"%s\", \"devices\": [",
	       r->n_throttle_disks ? throttle_hierarchy() : "none");
	for (i = 0; i < r->n_throttle_disks; i++)
		printf("%s\"%u:%u\"", i ? ", " : "",
		       major(r->throttle_disks[i]), minor(r->throttle_disks[i]));
	fputs("]", stdout);
	print_optional("kernel_reads", r->throttled.reads, r->throttled.known);
	print_optional("kernel_read_bytes", r->throttled.read_bytes,
		       r->throttled.known);
	printf(", \"budget_reads\": %llu, \"budget_spent\": %s",
	       (unsigned long long)r->budget_reads,
	       r->n_throttle_disks &&
	       r->budget_spent_disks == r->n_throttle_disks ? "true" : "false");
	fputs("}", stdout);
}

void throttle_print_summary(const struct replay *r)
{
	const struct throttle_limits *lim = &r->opt.throttle;
	char devices[THROTTLE_MAX_DISKS * 24] = "";
	size_t i, used = 0;

	if (!lim->riops)
		return;
	for (i = 0; i < r->n_throttle_disks && used < sizeof(devices); i++)
		used += (size_t)snprintf(devices + used, sizeof(devices) - used,
					 "%s%u:%u", i ? " " : "",
					 major(r->throttle_disks[i]),
					 minor(r->throttle_disks[i]));
	fprintf(stderr, "%s: throttled%s%s: riops=%llu", errmsg_tool(),
		lim->profile ? " as " : "", lim->profile ? lim->profile : "",
		(unsigned long long)lim->riops);
	if (lim->rbps)
		fprintf(stderr, ",rbps=%llu", (unsigned long long)lim->rbps);
	fprintf(stderr, " on %s (cgroup %s)", devices,
		r->n_throttle_disks ? throttle_hierarchy() : "none");
	if (r->throttled.known && r->stats.elapsed_s > 0)
		fprintf(stderr, "; the kernel counted %llu reads, %.0f per "
			"second", (unsigned long long)r->throttled.reads,
			(double)r->throttled.reads / r->stats.elapsed_s);
	if (r->n_throttle_disks)
		fprintf(stderr, "; %llu untimed reads spent the first "
			"slice's budget%s", (unsigned long long)r->budget_reads,
			r->budget_spent_disks == r->n_throttle_disks ? "" :
			" (not all of it: the disk is slower than the limit)");
	fputc('\n', stderr);
}
