/* --throttle: blk-throttle grants a cgroup a whole time slice's budget
 * (riops times the slice: 100 ms on a rotational disk, 20 ms otherwise,
 * DFL_THROTL_SLICE_HD and _SSD in block/blk-throttle.c) as soon as its
 * first read arrives, and each later slice's budget at the slice's start
 * (tg_within_iops_limit() rounds the elapsed time up to the next slice).
 * A run timed from its first read gets the first slice free: 1,000 reads
 * at riops=500 took 1.89 s, 529 IOPS. So before the timer starts, replay
 * reads the start of a trace file on each throttled disk with O_DIRECT
 * until it has asked for one read or byte more than a slice grants: the
 * last of these reads waits for the next slice, and the timed reads start
 * when its budget is released, as every later slice's reads do. Counting, not timing, decides when the
 * budget is spent, so a busy machine's slow reads cannot end it early.
 * docs/replay.md, "Slow storage". */
#include "replay.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "clock.h"
#include "errmsg.h"

/* Give up after this long: the device is slower than riops, and the
 * throttle never held a read back. */
#define BUDGET_LIMIT_NS 1000000000ull

/* The largest read of a spending run: rbps / riops (so that both budgets
 * run out together) within one block and this. */
#define BUDGET_READ_MAX (1u << 20)

/* The biggest file open on DISK whose first block O_DIRECT can read. */
static struct replay_file *file_on(struct replay *r, dev_t disk)
{
	struct replay_file *best = NULL;

	for (size_t i = 0; i < r->n_files; i++) {
		struct replay_file *f = &r->files[i];
		dev_t d;

		if (f->state == FILE_OPEN && f->size >= f->align &&
		    throttle_disk_of(f->dev, "", &d) == 0 && d == disk &&
		    (!best || f->size > best->size))
			best = f;
	}
	return best;
}

/* The slice blk-throttle uses on DISK, in ms. */
static unsigned int slice_ms(dev_t disk)
{
	char path[96], flag = '1';
	int fd;

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/queue/rotational",
		 major(disk), minor(disk));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, &flag, 1) != 1)
			flag = '1';
		close(fd);
	}
	return flag == '0' ? 20 : 100;
}

/* What one slice grants, and the reads that spend it. */
struct budget {
	uint64_t ios, bytes;       /* bytes: 0 without rbps */
	size_t size;               /* of each read */
};

static struct budget budget_of(const struct throttle_limits *lim,
			       const struct replay_file *f, dev_t disk)
{
	unsigned int ms = slice_ms(disk);
	struct budget b = {lim->riops * ms / 1000, lim->rbps * ms / 1000,
			   f->align};

	if (lim->rbps && lim->rbps / lim->riops > b.size)
		b.size = lim->rbps / lim->riops / f->align * f->align;
	if (b.size > BUDGET_READ_MAX)
		b.size = BUDGET_READ_MAX;
	if (b.size > f->size)
		b.size = f->size / f->align * f->align;
	return b;
}

/* Reads F's first B.size bytes until one read more than either budget
 * has been asked for; returns 1 when it was. */
static int spend_on(const struct replay_file *f, const struct budget *b,
		    uint64_t *reads)
{
	char path[64];
	void *buf = NULL;
	uint64_t start = monotonic_ns();
	uint64_t bytes = 0;
	int fd, spent = 0;

	/* A descriptor of its own with O_DIRECT: under --buffered or
	 * --prefetch the plan's one reads through the page cache. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", f->fd);
	fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0 || posix_memalign(&buf, f->align, b->size)) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while (!spent && monotonic_ns() - start < BUDGET_LIMIT_NS) {
		ssize_t n = pread(fd, buf, b->size, 0);

		if (n <= 0)
			break;
		++*reads;
		bytes += (uint64_t)n;
		spent = *reads > b->ios || (b->bytes && bytes > b->bytes);
	}
	free(buf);
	close(fd);
	return spent;
}

void throttle_spend_budget(struct replay *r)
{
	for (size_t i = 0; i < r->n_throttle_disks; i++) {
		dev_t disk = r->throttle_disks[i];
		struct replay_file *f = file_on(r, disk);
		struct budget b;

		if (!f)
			continue;
		b = budget_of(&r->opt.throttle, f, disk);
		r->budget_spent_disks += spend_on(f, &b, &r->budget_reads);
	}
	/* The cgroup's counters from here on are the timed reads'. */
	throttle_read_counts(&r->budget_counts);
}
