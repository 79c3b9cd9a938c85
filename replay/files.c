/* The trace's files: interning paths, opening them read-only without ever
 * blocking on something that is not a regular file, evicting them. */
#include "replay.h"
#include "array.h"
#include "tracefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t hash_path(const char *path, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= (unsigned char)path[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static size_t *index_slot(size_t *index, size_t cap, const struct replay *r,
			  const char *path, size_t len)
{
	size_t slot = (size_t)hash_path(path, len) & (cap - 1);

	for (;; slot = (slot + 1) & (cap - 1)) {
		const struct replay_file *f;

		if (index[slot] == 0)
			return &index[slot];
		f = &r->files[index[slot] - 1];
		if (f->path_len == len && memcmp(f->path, path, len) == 0)
			return &index[slot];
	}
}

/* Keeps the hash table at most half full. */
static int grow_index(struct replay *r)
{
	size_t cap = r->index_cap ? r->index_cap * 2 : 256, i;
	size_t *index;

	if (r->n_files + 1 <= r->index_cap / 2)
		return 0;
	index = calloc(cap, sizeof(*index));
	if (!index)
		return -1;
	for (i = 0; i < r->n_files; i++)
		*index_slot(index, cap, r, r->files[i].path,
			    r->files[i].path_len) = i + 1;
	free(r->file_index);
	r->file_index = index;
	r->index_cap = cap;
	return 0;
}

static int append_file(struct replay *r, const char *path, size_t len)
{
	struct replay_file *file;

	if (array_reserve(&r->files, &r->files_cap, r->n_files + 1,
			  sizeof(*r->files)) < 0)
		return -1;
	file = &r->files[r->n_files];
	memset(file, 0, sizeof(*file));
	file->fd = -1;
	file->path = malloc(len + 1);
	if (!file->path)
		return -1;
	memcpy(file->path, path, len);
	file->path[len] = '\0';
	file->path_len = len;
	r->n_files++;
	return 0;
}

/* Returns the index of PATH in r->files, adding it if new; -1 when out of
 * memory. */
long intern_file(struct replay *r, const char *path, size_t len)
{
	size_t *slot;

	if (grow_index(r) < 0)
		return -1;
	slot = index_slot(r->file_index, r->index_cap, r, path, len);
	if (*slot)
		return (long)(*slot - 1);
	if (append_file(r, path, len) < 0)
		return -1;
	*slot = r->n_files;
	return (long)(r->n_files - 1);
}

static const char *file_type_name(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR: return "is a directory";
	case S_IFIFO: return "is a FIFO";
	case S_IFBLK: return "is a block device";
	case S_IFCHR: return "is a character device";
	case S_IFSOCK: return "is a socket";
	}
	return "is not a regular file";
}

/* Paths that lead nowhere count as missing; files this process may not
 * open (a sandbox's device node: EPERM even for root) as not readable,
 * which is no error of the storage; anything else as an error. */
static enum skip_reason open_error_reason(int err)
{
	if (err == ENOENT || err == ENOTDIR || err == ELOOP ||
	    err == ENAMETOOLONG)
		return SKIP_MISSING;
	if (err == EPERM || err == EACCES)
		return SKIP_NOT_READABLE;
	return SKIP_IO_ERROR;
}

static void skip_file(struct replay *r, struct replay_file *file,
		      enum skip_reason reason, const char *why)
{
	file->state = FILE_SKIPPED;
	file->skip = reason;
	skip_message(r, reason, 0, file->path, file->path_len, "%s%s",
		     reason == SKIP_NOT_READABLE ? "not readable: " : "", why);
}

static int open_flags(const struct options *opt)
{
	/* O_NONBLOCK so that a FIFO or device that replaced the file after the
	 * stat() cannot block the open; O_NOATIME to leave no trace. */
	int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOATIME;

	if (opt->mode == MODE_DIRECT && !opt->plan)
		flags |= O_DIRECT;
	return flags;
}

static int open_read_only(struct replay *r, struct replay_file *file)
{
	int flags = open_flags(&r->opt);
	int fd = open(file->path, flags);

	if (fd < 0 && errno == EPERM && (flags & O_NOATIME))
		fd = open(file->path, flags & ~O_NOATIME);
	if (fd >= 0)
		return fd;
	if (errno == EINVAL && (flags & O_DIRECT))
		skip_file(r, file, SKIP_ODIRECT_REFUSED,
			  "filesystem refuses O_DIRECT (Invalid argument); "
			  "try --buffered");
	else
		skip_file(r, file, open_error_reason(errno),
			  errmsg_strerror(errno));
	return -1;
}

/* Bytes of the block device open on FD; 0 if it cannot tell. */
static uint64_t device_size(int fd)
{
	uint64_t size = 0;

	if (ioctl(fd, BLKGETSIZE64, &size) < 0)
		return 0;
	return size;
}

/* stat() first, so that directories, FIFOs and devices are never opened;
 * fstat() after, in case the path changed in between. */
static void open_one(struct replay *r, struct replay_file *file)
{
	struct stat st;
	mode_t mode;
	int fd;

	if (stat(file->path, &st) < 0) {
		skip_file(r, file, open_error_reason(errno),
			  errmsg_strerror(errno));
		return;
	}
	/* A block device is the path of metadata records (docs/trace-format.md). */
	if (!S_ISREG(st.st_mode) && !(S_ISBLK(st.st_mode) &&
	    tracefile_is_metadata(file->path, file->path_len))) {
		skip_file(r, file, SKIP_NOT_REGULAR, file_type_name(st.st_mode));
		return;
	}
	mode = st.st_mode & S_IFMT;
	fd = open_read_only(r, file);
	if (fd < 0)
		return;
	if (fstat(fd, &st) < 0 || (st.st_mode & S_IFMT) != mode ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		skip_file(r, file, SKIP_NOT_REGULAR,
			  "changed into something else while opened");
		close(fd);
		return;
	}
	file->fd = fd;
	file->state = FILE_OPEN;
	file->dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
	file->size = S_ISBLK(st.st_mode) ? device_size(fd) : (uint64_t)st.st_size;
	file->align = dio_alignment(fd, file);
	if (file->align == 0)
		file->align = st.st_blksize > 0 ? (uint64_t)st.st_blksize : 4096;
	/* Buffered reads and the prefetch wait pass must read exactly the
	 * requested pages: no readahead around them. */
	if (r->opt.mode != MODE_DIRECT)
		posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	map_file_extents(r, file);
}

static void rank_devices(struct replay *r)
{
	size_t i, j, ranks = 0;

	for (i = 0; i < r->n_files; i++) {
		struct replay_file *f = &r->files[i];

		if (f->state != FILE_OPEN)
			continue;
		f->device_rank = ranks;
		for (j = 0; j < i; j++)
			if (r->files[j].state == FILE_OPEN &&
			    r->files[j].dev == f->dev) {
				f->device_rank = r->files[j].device_rank;
				break;
			}
		if (f->device_rank == ranks)
			ranks++;
	}
}

void open_files(struct replay *r)
{
	size_t i;

	/* Files named only by access or map records (--used) have no pages
	 * to replay and are left alone. */
	for (i = 0; i < r->n_files && !r->fatal; i++)
		if (r->files[i].state == FILE_PENDING && r->files[i].has_pages)
			open_one(r, &r->files[i]);
	rank_devices(r);
}

void evict_files(struct replay *r)
{
	size_t i;

	for (i = 0; i < r->n_files; i++) {
		struct replay_file *f = &r->files[i];
		int err;

		if (f->state != FILE_OPEN)
			continue;
		err = posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
		if (err)
			skip_message(r, SKIP_IO_ERROR, 0, f->path, f->path_len,
				     "cannot evict: %s", errmsg_strerror(err));
	}
}

void close_files(struct replay *r)
{
	size_t i;

	for (i = 0; i < r->n_files; i++) {
		if (r->files[i].fd >= 0)
			close(r->files[i].fd);
		free(r->files[i].path);
		free(r->files[i].extents);
	}
	free(r->files);
	free(r->file_index);
	r->files = NULL;
	r->file_index = NULL;
	r->n_files = 0;
}
