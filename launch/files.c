/* Which files of a pack are still the ones recorded: device, inode, size
 * and mtime with one stat(); the CRC-32 of the first 4 KiB where asked
 * (a rewrite in place that kept size and mtime); the one line that names
 * the files skipped. The words are the Python planner's
 * (pagetrace/tools/launch_files.py), which the tests hold both to. */
#include "launch.h"
#include "array.h"
#include "escape.h"
#include "mountinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* How many paths the line names per reason before "and N more". */
#define SHOWN 3

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dup_printf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

static const char *stale_reason(const struct pack_file *f, const struct stat *st)
{
	if (major(st->st_dev) != f->major || minor(st->st_dev) != f->minor ||
	    (uint64_t)st->st_ino != f->ino)
		return "replaced";
	if ((uint64_t)st->st_size != f->size ||
	    (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec !=
	    f->mtime_ns)
		return "changed";
	return NULL;
}

struct devices {
	dev_t *dev;
	size_t n, cap;
};

static int add_mount(const struct mount_entry *m, void *arg)
{
	struct devices *d = arg;

	if (array_reserve(&d->dev, &d->cap, d->n + 1, sizeof(*d->dev)))
		return -1;
	d->dev[d->n++] = m->dev;
	return 0;
}

static int mounted(const struct devices *d, const struct pack_file *f)
{
	for (size_t i = 0; i < d->n; i++)
		if (major(d->dev[i]) == f->major && minor(d->dev[i]) == f->minor)
			return 1;
	return 0;
}

/* A file gone, or on another device: when its recorded device is not
 * mounted, that says more than "missing". */
static int not_mounted(const struct pack *pack, const char *gone, struct skipped *s)
{
	struct devices d = {0};

	if (for_each_mount(add_mount, &d) != 0) {
		free(d.dev);
		return 0;
	}
	for (size_t i = 0; i < pack->n_files; i++) {
		const struct pack_file *f = &pack->files[i];

		if (gone[i] && !mounted(&d, f)) {
			free(s->reason[i]);
			s->reason[i] = dup_printf("on device %u:%u, not mounted",
						  f->major, f->minor);
		}
	}
	free(d.dev);
	return 0;
}

static char *file_reason(const struct pack_file *f, char *gone)
{
	struct stat st;
	const char *reason;

	if (stat(f->path, &st) != 0) {
		if (errno == ENOENT) {
			*gone = 1;
			return strdup("missing");
		}
		return dup_printf("not checked (%s)", strerror(errno));
	}
	*gone = major(st.st_dev) != f->major || minor(st.st_dev) != f->minor;
	reason = stale_reason(f, &st);
	if (reason)
		return strdup(reason);
	if (geteuid() != 0 && access(f->path, R_OK) != 0)
		return dup_printf("not readable by uid %u", (unsigned)geteuid());
	return NULL;
}

int check_files(const struct pack *pack, struct skipped *s)
{
	char *gone = calloc(pack->n_files + 1, 1);
	int any_gone = 0;

	s->n_files = pack->n_files;
	s->reason = calloc(pack->n_files + 1, sizeof(*s->reason));
	if (!gone || !s->reason) {
		free(gone);
		return -1;
	}
	for (size_t i = 0; i < pack->n_files; i++) {
		s->reason[i] = file_reason(&pack->files[i], &gone[i]);
		any_gone |= gone[i];
	}
	if (any_gone)
		not_mounted(pack, gone, s);
	free(gone);
	return 0;
}

size_t count_kept(const struct skipped *s)
{
	size_t kept = 0;

	for (size_t i = 0; i < s->n_files; i++)
		kept += !s->reason[i];
	return kept;
}

static int head_changed(const struct pack_file *f)
{
	char head[PACKFILE_HEAD_BYTES];
	size_t want = f->size < sizeof(head) ? (size_t)f->size : sizeof(head);
	int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOATIME);
	ssize_t got;

	if (fd < 0 && errno == EPERM)
		fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 1;
	got = pread(fd, head, want, 0);
	close(fd);
	return got != (ssize_t)want || packfile_crc32(0, head, want) != f->head_crc32;
}

/* The first pages of every kept file asked for at once, so that the
 * device reads them in parallel; then each file's CRC-32 checked. */
int verify_content(const struct pack *pack, struct skipped *s)
{
	for (size_t i = 0; i < pack->n_files; i++) {
		int fd;

		if (s->reason[i])
			continue;
		fd = open(pack->files[i].path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (fd >= 0) {
			posix_fadvise(fd, 0, PACKFILE_HEAD_BYTES, POSIX_FADV_WILLNEED);
			close(fd);
		}
	}
	for (size_t i = 0; i < pack->n_files; i++)
		if (!s->reason[i] && head_changed(&pack->files[i]))
			s->reason[i] = strdup("changed (content)");
	return 0;
}

/* The reasons in the order the Python planner lists them: each at the
 * first file that had it, "on device ..., not mounted" last. */
static size_t reasons_in_order(const struct skipped *s, const char **order)
{
	size_t n = 0;

	for (int device_pass = 0; device_pass < 2; device_pass++) {
		for (size_t i = 0; i < s->n_files; i++) {
			const char *r = s->reason[i];
			size_t k;

			if (!r || (strncmp(r, "on device ", 10) == 0) != device_pass)
				continue;
			for (k = 0; k < n && strcmp(order[k], r); k++)
				;
			if (k == n)
				order[n++] = r;
		}
	}
	return n;
}

static void write_group(FILE *out, const struct pack *pack,
			const struct skipped *s, const char *reason)
{
	size_t count = 0, shown = 0;

	for (size_t i = 0; i < s->n_files; i++)
		count += s->reason[i] && !strcmp(s->reason[i], reason);
	fprintf(out, "%zu %s (", count, reason);
	for (size_t i = 0; i < s->n_files && shown < SHOWN; i++) {
		if (!s->reason[i] || strcmp(s->reason[i], reason))
			continue;
		if (shown++)
			fputs(", ", out);
		escape_write(out, pack->files[i].path, pack->files[i].path_len, NULL);
	}
	if (count > SHOWN)
		fprintf(out, " and %zu more", count - SHOWN);
	fputc(')', out);
}

char *skipped_line(const struct pack *pack, const struct skipped *s)
{
	const char **order = calloc(s->n_files + 1, sizeof(*order));
	size_t n, total = s->n_files, count = total - count_kept(s), size = 0;
	int unreadable = 0;
	char *line = NULL;
	FILE *out;

	if (!order || !(out = open_memstream(&line, &size))) {
		free(order);
		return NULL;
	}
	n = reasons_in_order(s, order);
	fprintf(out, "%zu of %zu files not prefetched: ", count, total);
	for (size_t k = 0; k < n; k++) {
		if (k)
			fputs("; ", out);
		write_group(out, pack, s, order[k]);
		unreadable |= strncmp(order[k], "not readable", 12) == 0;
	}
	if (unreadable)
		fputs("; the prefetch opens each file: run pagetrace launch as root "
		      "or as the files' owner", out);
	if (count == total)
		fputs("; record the pack again (pagetrace pack) or use --refine", out);
	fclose(out);
	free(order);
	return line;
}

void skipped_free(struct skipped *s)
{
	for (size_t i = 0; s->reason && i < s->n_files; i++)
		free(s->reason[i]);
	free(s->reason);
	s->reason = NULL;
}
