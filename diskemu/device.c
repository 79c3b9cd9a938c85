/* The emulated device's life: the FUSE file system that serves the image,
 * the loop device over it, the optional mount of its file system, and
 * their teardown in reverse order whatever ends the run. */
#define FUSE_USE_VERSION 31
#include "diskemu.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "errmsg.h"
#include "json.h"
#include "loopdev.h"

/* The file the FUSE file system shows: the image, as "/disk". */
#define DISK_NAME "disk"
/* How long the teardown waits for a busy mount or device. */
#define TEARDOWN_TRIES 50
#define TEARDOWN_STEP_US 100000

static struct diskemu *daemon_of(void)
{
	return fuse_get_context()->private_data;
}

static void sleep_until(double t)
{
	struct timespec ts = {(time_t)t, (long)((t - (time_t)t) * 1e9)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

static int fs_getattr(const char *path, struct stat *st,
		      struct fuse_file_info *fi)
{
	struct diskemu *d = daemon_of();

	(void)fi;
	memset(st, 0, sizeof(*st));
	if (strcmp(path, "/") == 0) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else if (strcmp(path, "/" DISK_NAME) == 0) {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)d->image_size;
	} else {
		return -ENOENT;
	}
	return 0;
}

/* direct_io: no FUSE page cache, so each loop request is one read here
 * (or several, when it is longer than FUSE's largest request). */
static int fs_open(const char *path, struct fuse_file_info *fi)
{
	if (strcmp(path, "/" DISK_NAME) != 0)
		return -ENOENT;
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	fi->direct_io = 1;
	return 0;
}

static void log_request(struct diskemu *d, double arrival, uint64_t off,
			size_t size, const struct drive_timing *t)
{
	fprintf(d->log, "%.6f,%.6f,%.6f,%llu,%zu,%.0f,%.4f,%.4f,%.4f,%d\n",
		arrival, t->start, t->done, (unsigned long long)off, size,
		t->distance, t->seek_s * 1e3, t->rotation_s * 1e3,
		t->transfer_s * 1e3, t->buffered);
}

int diskemu_read(struct diskemu *d, char *buf, size_t size, uint64_t off)
{
	double arrival = monotonic_s() - d->t0;
	struct drive_timing t;
	ssize_t n;

	if (off >= d->image_size)
		return 0;
	if (size > d->image_size - off)
		size = d->image_size - off;
	n = pread(d->image_fd, buf, size, (off_t)off);
	if (n < 0)
		return -errno;
	t = drive_serve(&d->model, &d->state, arrival, (double)off,
			(double)size);
	d->stats.reads++;
	d->stats.bytes += size;
	d->stats.buffered += t.buffered;
	d->stats.seek_s += t.seek_s;
	d->stats.rotation_s += t.rotation_s;
	d->stats.transfer_s += t.transfer_s;
	d->stats.busy_s += t.done - t.start;
	if (d->log)
		log_request(d, arrival, off, size, &t);
	sleep_until(d->t0 + t.done);
	return (int)n;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	(void)path;
	(void)fi;
	return diskemu_read(daemon_of(), buf, size, (uint64_t)off);
}

static void *fs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	cfg->direct_io = 1;
	cfg->kernel_cache = 0;
	return daemon_of();
}

static const struct fuse_operations fs_ops = {
	.init = fs_init,
	.getattr = fs_getattr,
	.open = fs_open,
	.read = fs_read,
};

/* One thread serves FUSE requests one at a time: the one head. When the
 * connection ends, it wakes the main thread. */
static void on_wake(int sig)
{
	(void)sig;
}

/* libfuse's buffer for one request: 256 pages and a header, the size it
 * tells the kernel it reads with. */
#define REQUEST_PAGES 256
#define REQUEST_HEADER 4096

/*
 * fuse_loop(f), with the connection's end ours to tell: the kernel ends it
 * with ENODEV once unmounted, or with ECONNABORTED when the detached mount
 * goes while a request is being read (the loop device letting go of the
 * image); either ends the loop without a word, where libfuse's own loop
 * printed the second. Any other failure is said in one line.
 */
static void serve_requests(struct fuse *f)
{
	struct fuse_session *se = fuse_get_session(f);
	size_t size = REQUEST_PAGES * (size_t)sysconf(_SC_PAGESIZE) + REQUEST_HEADER;
	struct fuse_buf buf = {.mem = malloc(size)};
	ssize_t n;

	if (!buf.mem) {
		errmsg("FUSE", "%s", errmsg_strerror(ENOMEM));
		return;
	}
	while (!fuse_session_exited(se)) {
		n = read(fuse_session_fd(se), buf.mem, size);
		/* ENOENT: the request was interrupted, as libfuse reads it. */
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOENT))
			continue;
		if (n < 0 && errno != ENODEV && errno != ECONNABORTED)
			errmsg("FUSE", "reading /dev/fuse: %s", errmsg_strerror(errno));
		if (n <= 0)
			break;
		buf.size = n;
		fuse_session_process_buf(se, &buf);
	}
	free(buf.mem);
	fuse_session_reset(se);
}

static void *serve_thread(void *arg)
{
	struct sched_param rt = {.sched_priority = 10};
	struct sigaction wake = {.sa_handler = on_wake};  /* no SA_RESTART */
	sigset_t set;

	sigaction(SIGUSR2, &wake, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);

	/* The drive's clock: wake at the modelled completion, not 50 us
	 * (the default timer slack) or a busy machine's time slice later.
	 * Without the privilege both are only less precise. */
	prctl(PR_SET_TIMERSLACK, 1UL);
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &rt);
	serve_requests(arg);
	kill(getpid(), SIGUSR1);
	return NULL;
}

static struct fuse *fuse_start(struct diskemu *d, pthread_t *thread)
{
	char *argv[] = {"diskemu", "-o", "ro", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	struct fuse *f = fuse_new(&args, &fs_ops, sizeof(fs_ops), d);

	if (!f) {
		errmsg("FUSE", "cannot create the file system");
		return NULL;
	}
	if (fuse_mount(f, d->fuse_dir) < 0) {
		errmsg(d->fuse_dir, "cannot mount the FUSE file system");
		fuse_destroy(f);
		return NULL;
	}
	if (pthread_create(thread, NULL, serve_thread, f)) {
		errmsg("FUSE", "cannot start the serving thread");
		fuse_unmount(f);
		fuse_destroy(f);
		return NULL;
	}
	return f;
}

/* The image through FUSE, on a loop device. The FUSE mount is detached
 * from the tree once the loop device holds its file: nothing of it is left
 * to see or unmount, and it ends with the loop device. */
static int attach(struct diskemu *d)
{
	char path[96], name[64];
	int fd;

	snprintf(path, sizeof(path), "%s/" DISK_NAME, d->fuse_dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		errmsg(path, "%s", errmsg_strerror(errno));
		return -1;
	}
	snprintf(name, sizeof(name), "diskemu:%s", d->model.p.name);
	d->loop_fd = loop_attach(fd, name, d->dev, sizeof(d->dev));
	close(fd);
	umount2(d->fuse_dir, MNT_DETACH);
	rmdir(d->fuse_dir);
	d->fuse_dir[0] = '\0';
	if (d->loop_fd < 0)
		return -1;
	return loop_set_read_ahead(d->dev, d->opt.read_ahead_kb);
}

/* The file system types --mount tries, as mount(8) would probe them. */
static const char *const fs_types[] = {"ext4", "xfs", "btrfs", "vfat",
				       "iso9660", "squashfs", NULL};

/* Read-only, and without replaying a journal: the device cannot be
 * written, and an image copied from a mounted file system may need one. */
static int mount_fs(const struct diskemu *d)
{
	int err = 0;

	for (const char *const *t = fs_types; *t; t++) {
		const char *data = strcmp(*t, "ext4") == 0 ||
			strcmp(*t, "xfs") == 0 ? "norecovery" : NULL;

		if (mount(d->dev, d->opt.mount, *t, MS_RDONLY, data) == 0)
			return 0;
		/* EINVAL: not this type; ENODEV: a type the kernel lacks. */
		if (errno != EINVAL && errno != ENODEV)
			err = errno;
	}
	if (err)
		errmsg(d->opt.mount, "cannot mount %s: %s", d->dev,
		       errmsg_strerror(err));
	else
		errmsg(d->opt.mount, "cannot mount %s: no file system of a "
		       "type it knows (ext4, xfs, btrfs, vfat, iso9660, "
		       "squashfs)", d->dev);
	return -1;
}

static int unmount_fs(const char *dir)
{
	for (int i = 0; i < TEARDOWN_TRIES; i++) {
		if (umount2(dir, 0) == 0 || errno == EINVAL)
			return 0;
		if (errno != EBUSY)
			break;
		usleep(TEARDOWN_STEP_US);
	}
	errmsg(dir, "busy: detached lazily (the device is freed when its "
	       "last user is done)");
	umount2(dir, MNT_DETACH);
	return -1;
}

static void print_ready(const struct diskemu *d)
{
	if (d->opt.json) {
		fputs("{\"device\":", stdout);
		json_puts(stdout, d->dev);
		fputs(",\"profile\":", stdout);
		json_puts(stdout, d->model.p.name);
		fputs(",\"mount\":", stdout);
		json_puts_or_null(stdout, d->opt.mount);
		fputs("}\n", stdout);
	} else {
		printf("%s\n", d->dev);
	}
	fflush(stdout);
}

static void print_stats(const struct diskemu *d)
{
	const struct diskemu_stats *s = &d->stats;

	if (d->opt.json)
		printf("{\"reads\":%llu,\"bytes\":%llu,\"buffered\":%llu,"
		       "\"seek_s\":%.6f,\"rotation_s\":%.6f,"
		       "\"transfer_s\":%.6f,\"busy_s\":%.6f}\n",
		       (unsigned long long)s->reads,
		       (unsigned long long)s->bytes,
		       (unsigned long long)s->buffered, s->seek_s,
		       s->rotation_s, s->transfer_s, s->busy_s);
	if (!d->opt.quiet)
		fprintf(stderr, "diskemu: %s: %llu reads, %llu bytes (%llu from "
			"the read-ahead buffer), busy %.3f s: seek %.3f s, "
			"rotation %.3f s, transfer %.3f s\n", d->dev,
			(unsigned long long)s->reads,
			(unsigned long long)s->bytes,
			(unsigned long long)s->buffered, s->busy_s, s->seek_s,
			s->rotation_s, s->transfer_s);
}

static int wait_for_signal(sigset_t *set)
{
	int sig = 0;

	sigwait(set, &sig);
	return sig;
}

/* Unmount, detach, then wait for the FUSE connection to end (it does when
 * the loop device lets go of the file). */
static int teardown(struct diskemu *d, struct fuse *f, pthread_t thread,
		    int mounted)
{
	struct timespec deadline;
	int status = 0;

	if (mounted && unmount_fs(d->opt.mount) < 0)
		status = 1;
	if (d->loop_fd >= 0 && loop_detach(d->loop_fd, d->dev) < 0) {
		errmsg(d->dev, "still open by another process: it is detached "
		       "when that closes it");
		status = 1;
	}
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 5;
	if (pthread_timedjoin_np(thread, NULL, &deadline) != 0) {
		/* The device is still held: interrupt the serving thread's
		 * read of /dev/fuse; closing it (fuse_destroy) then aborts the
		 * connection, and the holder's reads fail from then on. */
		fuse_exit(f);
		pthread_kill(thread, SIGUSR2);
		pthread_join(thread, NULL);
	}
	fuse_destroy(f);
	return status;
}

static int open_log(struct diskemu *d)
{
	if (!d->opt.log)
		return 0;
	d->log = fopen(d->opt.log, "we");
	if (!d->log) {
		errmsg(d->opt.log, "%s", errmsg_strerror(errno));
		return -1;
	}
	fprintf(d->log, "arrival_s,start_s,done_s,offset,length,distance,"
		"seek_ms,rotation_ms,transfer_ms,buffered\n");
	return 0;
}

int diskemu_serve(struct diskemu *d)
{
	sigset_t set;
	pthread_t thread;
	struct fuse *f;
	int status = 1, mounted = 0, sig = 0;

	sigemptyset(&set);
	for (int s = 0, sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, 0}; sigs[s];
	     s++)
		sigaddset(&set, sigs[s]);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	/* A reader of stdout or stderr that went away (a parent that died)
	 * must not kill the daemon half-way through its teardown. */
	signal(SIGPIPE, SIG_IGN);
	if (d->opt.exit_with_parent)
		prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (open_log(d) < 0)
		return 1;
	snprintf(d->fuse_dir, sizeof(d->fuse_dir), "/tmp/diskemu.XXXXXX");
	if (!mkdtemp(d->fuse_dir)) {
		errmsg(d->fuse_dir, "%s", errmsg_strerror(errno));
		return 1;
	}
	d->t0 = monotonic_s();
	f = fuse_start(d, &thread);
	if (!f) {
		rmdir(d->fuse_dir);
		return 1;
	}
	if (attach(d) == 0 && (!d->opt.mount || mount_fs(d) == 0)) {
		mounted = d->opt.mount != NULL;
		print_ready(d);
		sig = wait_for_signal(&set);
		status = 0;
	}
	if (d->fuse_dir[0]) {       /* attach failed before detaching it */
		umount2(d->fuse_dir, MNT_DETACH);
		rmdir(d->fuse_dir);
	}
	if (teardown(d, f, thread, mounted))
		status = 1;
	if (sig == SIGUSR1) {
		errmsg(d->dev, "the FUSE connection ended early");
		status = 1;
	}
	if (d->log)
		fclose(d->log);
	if (status == 0)
		print_stats(d);
	return status;
}
