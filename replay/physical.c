/* Where a file's bytes are on its device (FIEMAP) and how O_DIRECT I/O on
 * it must be aligned (statx DIOALIGN, else BLKSSZGET on the device). */
#include "replay.h"
#include "escape.h"
#include "array.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIEMAP_BATCH 256

/* Extents whose physical address says nothing about where the bytes are. */
#define FIEMAP_NOT_LOCATED (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | \
			    FIEMAP_EXTENT_ENCODED | FIEMAP_EXTENT_DATA_INLINE | \
			    FIEMAP_EXTENT_DATA_TAIL | FIEMAP_EXTENT_NOT_ALIGNED)

static int append_extent(struct replay_file *file, size_t *cap,
			 const struct fiemap_extent *fe)
{
	if (array_reserve(&file->extents, cap, file->n_extents + 1,
			  sizeof(*file->extents)) < 0)
		return -1;
	file->extents[file->n_extents].logical = fe->fe_logical;
	file->extents[file->n_extents].physical = fe->fe_physical;
	file->extents[file->n_extents].length = fe->fe_length;
	file->n_extents++;
	return 0;
}

/* Reads the extent map in batches; returns 0, or -1 with errno set. No
 * FIEMAP_FLAG_SYNC: that would write back dirty data, and replay writes
 * nothing. Delayed-allocation extents come back as not located. */
static int read_extents(struct replay_file *file)
{
	size_t size = sizeof(struct fiemap) +
		      FIEMAP_BATCH * sizeof(struct fiemap_extent);
	struct fiemap *fm = malloc(size);
	uint64_t start = 0;
	size_t cap = 0, i;
	int ret = -1;

	if (!fm)
		goto cleanup;
	for (;;) {
		const struct fiemap_extent *last;

		memset(fm, 0, size);
		fm->fm_start = start;
		fm->fm_length = FIEMAP_MAX_OFFSET - start;
		fm->fm_extent_count = FIEMAP_BATCH;
		if (ioctl(file->fd, FS_IOC_FIEMAP, fm) < 0)
			goto cleanup;
		for (i = 0; i < fm->fm_mapped_extents; i++)
			if (!(fm->fm_extents[i].fe_flags & FIEMAP_NOT_LOCATED) &&
			    append_extent(file, &cap, &fm->fm_extents[i]) < 0)
				goto cleanup;
		if (fm->fm_mapped_extents == 0)
			break;
		last = &fm->fm_extents[fm->fm_mapped_extents - 1];
		if ((last->fe_flags & FIEMAP_EXTENT_LAST) ||
		    last->fe_logical + last->fe_length <= start)
			break;
		start = last->fe_logical + last->fe_length;
	}
	ret = 0;
cleanup:
	free(fm);
	return ret;
}

/* A block device (metadata records) is its own map: offset = physical. */
static int map_device(struct replay_file *file)
{
	struct fiemap_extent whole = { .fe_length = file->size };
	struct stat st;
	size_t cap = 0;

	if (fstat(file->fd, &st) < 0 || !S_ISBLK(st.st_mode))
		return -1;
	return append_extent(file, &cap, &whole) < 0 ? -1 : 0;
}

void map_file_extents(struct replay *r, struct replay_file *file)
{
	char *what;

	if (map_device(file) == 0 || read_extents(file) == 0)
		return;
	free(file->extents);
	file->extents = NULL;
	file->n_extents = 0;
	/* Only --sorted depends on it; elsewhere an empty physical_offset
	 * column says enough. */
	if (r->opt.order == ORDER_SORTED) {
		int err = errno;

		what = escape_bytes(file->path, file->path_len);
		errmsg(what ? what : "(path)", "FIEMAP failed (%s); ordering "
		       "this file by offset", errmsg_strerror(err));
		free(what);
	}
}

/* The extent containing OFFSET, or the first one after it, or NULL. */
static const struct extent *extent_at_or_after(const struct replay_file *file,
					       uint64_t offset)
{
	size_t lo = 0, hi = file->n_extents;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct extent *e = &file->extents[mid];

		if (e->logical + e->length <= offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < file->n_extents ? &file->extents[lo] : NULL;
}

uint64_t physical_of(const struct replay_file *file, uint64_t offset)
{
	const struct extent *e = extent_at_or_after(file, offset);

	if (!e || e->logical > offset)
		return PHYSICAL_UNKNOWN;
	return e->physical + (offset - e->logical);
}

/* End of the run of bytes from OFFSET that are all in one extent, or all
 * in one hole. */
uint64_t extent_end(const struct replay_file *file, uint64_t offset)
{
	const struct extent *e = extent_at_or_after(file, offset);

	if (!e)
		return UINT64_MAX;
	if (e->logical > offset)
		return e->logical;
	return e->logical + e->length;
}

/* Logical block size of the block device DEV, through its node in /dev;
 * 0 when there is none (e.g. network filesystems, btrfs's anonymous dev). */
static uint64_t device_block_size(dev_t dev)
{
	static dev_t cached_dev;
	static uint64_t cached_size;
	uint64_t size = 0;
	struct dirent *entry;
	DIR *dir;

	if (cached_size && cached_dev == dev)
		return cached_size;
	dir = opendir("/dev");
	if (!dir)
		return 0;
	while (size == 0 && (entry = readdir(dir))) {
		struct stat st;
		int fd, block_size;

		if (fstatat(dirfd(dir), entry->d_name, &st,
			    AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISBLK(st.st_mode) || st.st_rdev != dev)
			continue;
		fd = openat(dirfd(dir), entry->d_name,
			    O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (ioctl(fd, BLKSSZGET, &block_size) == 0 && block_size > 0)
			size = (uint64_t)block_size;
		close(fd);
	}
	closedir(dir);
	cached_dev = dev;
	cached_size = size;
	return size;
}

/* What O_DIRECT offsets and lengths must be multiples of; 0 if unknown.
 * statx knows it per file (it can differ from the device's, e.g. on
 * filesystems with larger blocks); the device's logical block size is the
 * classic answer. */
uint64_t dio_alignment(int fd, const struct replay_file *file)
{
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > 0)
		return stx.stx_dio_offset_align;
	return device_block_size(file->dev);
}
