/* The throttled cgroup of --throttle: found (cgroup v2 with the io
 * controller, else the v1 blkio hierarchy), created, limited, joined,
 * and left and removed again on every way out: the end of the run, exit(),
 * SIGINT, SIGTERM and SIGHUP. One per process, so its state is global:
 * the signal handler needs it. */
#include "replay.h"
#include "throttle.h"
#include "array.h"
#include "mountinfo.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define MAX_DISKS THROTTLE_MAX_DISKS

struct hierarchy {
	int version;                  /* 1 or 2 */
	char point[PATH_MAX];         /* where it is mounted */
	char root[PATH_MAX];          /* the cgroup mounted there */
};

/* Everything the signal handler touches is prepared before it can run. */
static struct {
	int version;
	char dir[PATH_MAX + 64];      /* the cgroup created */
	char procs[PATH_MAX + 96];    /* its cgroup.procs */
	char home[2 * PATH_MAX + 16]; /* cgroup.procs of where we came from */
	char subtree[PATH_MAX + 32];  /* v2 root's cgroup.subtree_control */
	char pid[24];
	char interrupted[128];        /* the line written on a signal */
	dev_t disks[MAX_DISKS];
	size_t n_disks;
	volatile sig_atomic_t created, joined, enabled_io, handlers;
	struct sigaction old[3];
} cg;

static const int caught[3] = {SIGINT, SIGTERM, SIGHUP};

/* --- small file helpers (async-signal-safe: open, write, close) ------- */

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t len = (ssize_t)strlen(text), n;

	if (fd < 0)
		return -1;
	n = write(fd, text, (size_t)len);
	if (n != len) {
		int err = n < 0 ? errno : EIO;

		close(fd);
		errno = err;
		return -1;
	}
	return close(fd);
}

/* The first line of PATH into BUF; -1 when it cannot be read. */
static int read_line(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");
	int ok;

	if (!f)
		return -1;
	ok = fgets(buf, (int)size, f) != NULL;
	fclose(f);
	if (!ok)
		buf[0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* WORD in a list separated by blanks or commas. */
static int has_word(const char *list, const char *word)
{
	size_t len = strlen(word);
	const char *p = list;

	while ((p = strstr(p, word)) != NULL) {
		int starts = p == list || p[-1] == ' ' || p[-1] == ',';
		int ends = p[len] == '\0' || p[len] == ' ' || p[len] == ',';

		if (starts && ends)
			return 1;
		p += len;
	}
	return 0;
}

/* --- finding the hierarchy -------------------------------------------- */

static int match_hierarchy(const struct mount_entry *m, void *arg)
{
	struct hierarchy *h = arg;
	int v2 = strcmp(m->fstype, "cgroup2") == 0;
	int v1 = strcmp(m->fstype, "cgroup") == 0 &&
		 has_word(m->options, "blkio");

	if ((h->version == 2 && !v2) || (h->version == 1 && !v1))
		return 0;
	snprintf(h->point, sizeof(h->point), "%s", m->point);
	snprintf(h->root, sizeof(h->root), "%s", m->root);
	return 1;
}

static int v2_offers_io(const struct hierarchy *h)
{
	char file[PATH_MAX + 32], line[512];

	snprintf(file, sizeof(file), "%s/cgroup.controllers", h->point);
	return read_line(file, line, sizeof(line)) == 0 && has_word(line, "io");
}

static int v1_has_throttle(const struct hierarchy *h)
{
	char file[PATH_MAX + 48];

	snprintf(file, sizeof(file), "%s/blkio.throttle.read_iops_device",
		 h->point);
	return access(file, F_OK) == 0;
}

/* cgroup v2 when it offers the io controller, else v1 blkio; -1 after
 * saying why neither can throttle. */
static int find_hierarchy(struct hierarchy *h)
{
	struct hierarchy v1 = {.version = 1};
	int have_v2, have_v1;

	h->version = 2;
	have_v2 = for_each_mount(match_hierarchy, h) == 1;
	if (have_v2 && v2_offers_io(h))
		return 0;
	have_v1 = for_each_mount(match_hierarchy, &v1) == 1;
	if (have_v1 && v1_has_throttle(&v1)) {
		*h = v1;
		return 0;
	}
	if (have_v1)
		errmsg("--throttle", "the kernel has no blk-throttle: %s has no "
		       "blkio.throttle.read_iops_device "
		       "(CONFIG_BLK_DEV_THROTTLING)", v1.point);
	else if (have_v2)
		errmsg("--throttle", "no blk-throttle here: cgroup v2 (%s) does "
		       "not offer the io controller and no cgroup v1 blkio "
		       "hierarchy is mounted", h->point);
	else
		errmsg("--throttle", "no blk-throttle here: neither cgroup v2 "
		       "nor a cgroup v1 blkio hierarchy is mounted");
	return -1;
}

/* cgroup.procs of the cgroup this process is in, from /proc/self/cgroup. */
static int find_home(const struct hierarchy *h)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char *line = NULL, *path = NULL;
	size_t cap = 0, root_len = strlen(h->root);

	if (!f)
		return -1;
	while (!path && getline(&line, &cap, f) > 0) {
		char *controllers = strchr(line, ':'), *p;

		if (!controllers || !(p = strchr(controllers + 1, ':')))
			continue;
		*p++ = '\0';
		p[strcspn(p, "\n")] = '\0';
		if (h->version == 2 ? strcmp(controllers + 1, "") == 0 :
		    has_word(controllers + 1, "blkio"))
			path = p;
	}
	fclose(f);
	if (path && root_len > 1 && strncmp(path, h->root, root_len) == 0)
		path += root_len;
	if (path)
		snprintf(cg.home, sizeof(cg.home), "%s%s/cgroup.procs",
			 h->point, strcmp(path, "/") == 0 ? "" : path);
	free(line);
	return path ? 0 : -1;
}

/* --- creating, limiting, joining -------------------------------------- */

/* v2: children get io.max only when the parent's subtree_control enables
 * io. Enabled here if it was not, and disabled again at the end. */
static int enable_io(const struct hierarchy *h)
{
	char line[512];

	snprintf(cg.subtree, sizeof(cg.subtree), "%s/cgroup.subtree_control",
		 h->point);
	if (read_line(cg.subtree, line, sizeof(line)) == 0 &&
	    has_word(line, "io"))
		return 0;
	if (write_file(cg.subtree, "+io") < 0) {
		errmsg(cg.subtree, "cannot enable the io controller: %s",
		       errmsg_strerror(errno));
		return -1;
	}
	cg.enabled_io = 1;
	return 0;
}

/* The hint added to a refused cgroup write: cgroupfs refuses non-root so. */
static const char *needs_root(int err)
{
	return err == EACCES || err == EPERM || err == EROFS ? " (needs root)" : "";
}

static int create_cgroup(const struct hierarchy *h)
{
	snprintf(cg.dir, sizeof(cg.dir), "%s/pagetrace-%.32s.%ld", h->point,
		 errmsg_tool(), (long)getpid());
	snprintf(cg.procs, sizeof(cg.procs), "%s/cgroup.procs", cg.dir);
	if (mkdir(cg.dir, 0755) < 0) {
		int err = errno;

		errmsg("--throttle", "cannot create the cgroup %s: %s%s", cg.dir,
		       errmsg_strerror(err), needs_root(err));
		return -1;
	}
	cg.created = 1;
	return 0;
}

static int set_limit(const char *file, const char *text, dev_t disk)
{
	char path[PATH_MAX + 128];

	snprintf(path, sizeof(path), "%s/%s", cg.dir, file);
	if (write_file(path, text) == 0)
		return 0;
	errmsg("--throttle", "device %u:%u: the kernel refused the limit "
	       "(%s: %s)", major(disk), minor(disk), path,
	       errmsg_strerror(errno));
	return -1;
}

static int limit_disk(const struct throttle_limits *lim, dev_t disk)
{
	char text[128], rbps[32] = "max";

	if (cg.version == 2) {
		if (lim->rbps)
			snprintf(rbps, sizeof(rbps), "%llu",
				 (unsigned long long)lim->rbps);
		snprintf(text, sizeof(text), "%u:%u riops=%llu rbps=%s",
			 major(disk), minor(disk),
			 (unsigned long long)lim->riops, rbps);
		return set_limit("io.max", text, disk);
	}
	snprintf(text, sizeof(text), "%u:%u %llu", major(disk), minor(disk),
		 (unsigned long long)lim->riops);
	if (set_limit("blkio.throttle.read_iops_device", text, disk) < 0)
		return -1;
	if (!lim->rbps)
		return 0;
	snprintf(text, sizeof(text), "%u:%u %llu", major(disk), minor(disk),
		 (unsigned long long)lim->rbps);
	return set_limit("blkio.throttle.read_bps_device", text, disk);
}

static int check_io_max(void)
{
	char file[PATH_MAX + 96];

	snprintf(file, sizeof(file), "%s/io.max", cg.dir);
	if (access(file, F_OK) == 0)
		return 0;
	errmsg("--throttle", "the kernel has no blk-throttle: the io "
	       "controller is on, but %s is missing "
	       "(CONFIG_BLK_DEV_THROTTLING)", file);
	return -1;
}

/* --cgroup DIR. Joined after the files are open: opening them reads
 * directories and inodes, which would otherwise be charged to the
 * cgroup's limits and use up the budget blk-throttle grants at the start
 * of a time slice, so the replayed reads would start later than a cold
 * start's first reads do (docs/replay.md, "Your own cgroup"). */
int throttle_join(const char *dir)
{
	char procs[PATH_MAX + 32], pid[24];
	struct stat st;
	int err;

	if (stat(dir, &st) < 0) {
		errmsg(dir, "cannot join the cgroup: %s",
		       errmsg_strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		errmsg(dir, "cannot join the cgroup: not a directory");
		return -1;
	}
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	if (access(procs, F_OK) < 0) {
		errmsg(dir, "cannot join the cgroup: not a cgroup directory "
		       "(it has no cgroup.procs)");
		return -1;
	}
	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	if (write_file(procs, pid) == 0)
		return 0;
	err = errno;
	errmsg(dir, "cannot join the cgroup: %s%s", errmsg_strerror(err),
	       needs_root(err));
	return -1;
}

/* --- leaving ---------------------------------------------------------- */

static void sleep_ms(long ms)
{
	struct timespec ts = {0, ms * 1000000L};

	nanosleep(&ts, NULL);
}

/* Async-signal-safe: writes, rmdir and nanosleep only. */
static void leave_and_remove(void)
{
	int tries;

	if (cg.joined && write_file(cg.home, cg.pid) == 0)
		cg.joined = 0;
	/* Right after the move the kernel may still count us a moment. */
	for (tries = 0; cg.created && !cg.joined && tries < 50; tries++) {
		if (rmdir(cg.dir) == 0 || errno == ENOENT)
			cg.created = 0;
		else if (errno == EBUSY)
			sleep_ms(10);
		else
			break;
	}
	if (cg.enabled_io && !cg.created && write_file(cg.subtree, "-io") == 0)
		cg.enabled_io = 0;
}

static void on_signal(int sig)
{
	ssize_t ignored;

	leave_and_remove();
	ignored = write(STDERR_FILENO, cg.interrupted, strlen(cg.interrupted));
	(void)ignored;
	_exit(128 + sig);
}

static void set_handlers(void)
{
	struct sigaction sa;
	size_t i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigfillset(&sa.sa_mask);
	for (i = 0; i < 3; i++)
		sigaction(caught[i], &sa, &cg.old[i]);
	cg.handlers = 1;
}

static void block_signals(sigset_t *old)
{
	sigset_t set;
	size_t i;

	sigemptyset(&set);
	for (i = 0; i < 3; i++)
		sigaddset(&set, caught[i]);
	pthread_sigmask(SIG_BLOCK, &set, old);
}

void throttle_end(void)
{
	sigset_t old;
	size_t i;

	if (!cg.version)
		return;
	block_signals(&old);
	leave_and_remove();
	if (cg.created)
		errmsg(cg.dir, "the throttle cgroup could not be removed: %s",
		       errmsg_strerror(errno));
	if (cg.handlers)
		for (i = 0; i < 3; i++)
			sigaction(caught[i], &cg.old[i], NULL);
	cg.handlers = 0;
	cg.version = 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* --- beginning -------------------------------------------------------- */

static int setup(const struct throttle_limits *lim, const struct hierarchy *h)
{
	size_t i;

	if (find_home(h) < 0) {
		errmsg("--throttle", "cannot find this process's cgroup in "
		       "/proc/self/cgroup");
		return -1;
	}
	if (h->version == 2 && enable_io(h) < 0)
		return -1;
	if (create_cgroup(h) < 0)
		return -1;
	if (h->version == 2 && check_io_max() < 0)
		return -1;
	for (i = 0; i < cg.n_disks; i++)
		if (limit_disk(lim, cg.disks[i]) < 0)
			return -1;
	if (write_file(cg.procs, cg.pid) < 0) {
		errmsg(cg.procs, "cannot join the throttle cgroup: %s",
		       errmsg_strerror(errno));
		return -1;
	}
	cg.joined = 1;
	return 0;
}

/* A run killed by SIGKILL (or the OOM killer) could not remove its
 * cgroup: pagetrace-TOOL.PID directories of processes that are gone are
 * removed now. rmdir only removes an empty cgroup, so one still in use is
 * left alone. */
static void remove_stale(const struct hierarchy *h)
{
	DIR *dir = opendir(h->point);
	struct dirent *e;

	if (!dir)
		return;
	while ((e = readdir(dir)) != NULL) {
		const char *dot = strrchr(e->d_name, '.');
		char path[PATH_MAX + 300];
		long pid;

		if (strncmp(e->d_name, "pagetrace-", 10) != 0 || !dot ||
		    (pid = strtol(dot + 1, NULL, 10)) <= 0 ||
		    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", h->point, e->d_name);
		rmdir(path);
	}
	closedir(dir);
}

int throttle_begin(const struct throttle_limits *lim, const dev_t *disks,
		   size_t n_disks)
{
	struct hierarchy h = {0};
	sigset_t old;
	int ret;

	if (n_disks > MAX_DISKS) {
		errmsg("--throttle", "the trace's files are on %zu disks; at "
		       "most %d can be throttled", n_disks, MAX_DISKS);
		return -1;
	}
	if (find_hierarchy(&h) < 0)
		return -1;
	remove_stale(&h);
	memcpy(cg.disks, disks, n_disks * sizeof(*disks));
	cg.n_disks = n_disks;
	cg.version = h.version;
	snprintf(cg.pid, sizeof(cg.pid), "%ld", (long)getpid());
	snprintf(cg.interrupted, sizeof(cg.interrupted),
		 "%s: interrupted; the throttle cgroup is removed\n",
		 errmsg_tool());
	atexit(throttle_end);
	block_signals(&old);
	set_handlers();
	ret = setup(lim, &h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret < 0)
		throttle_end();
	return ret;
}

const char *throttle_hierarchy(void)
{
	return cg.version == 2 ? "v2" : "v1";
}

/* Adds the counter KEY ("rios=", "rbytes=") of DISK's line in io.stat. */
static uint64_t v2_counter(const char *line, const char *key)
{
	const char *p = strstr(line, key);

	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static int is_throttled_disk(unsigned int major_, unsigned int minor_)
{
	size_t i;

	for (i = 0; i < cg.n_disks; i++)
		if (major(cg.disks[i]) == major_ && minor(cg.disks[i]) == minor_)
			return 1;
	return 0;
}

/* Sums the Read lines (v1) or rios/rbytes (v2) of the throttled disks. */
static int sum_stat(const char *file, uint64_t *value, const char *key)
{
	char path[PATH_MAX + 128], line[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", cg.dir, file);
	f = fopen(path, "re");
	if (!f)
		return -1;
	*value = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned int major_, minor_;
		char op[16];
		unsigned long long n;

		if (sscanf(line, "%u:%u", &major_, &minor_) != 2 ||
		    !is_throttled_disk(major_, minor_))
			continue;
		if (cg.version == 2)
			*value += v2_counter(line, key);
		else if (sscanf(line, "%*u:%*u %15s %llu", op, &n) == 2 &&
			 strcmp(op, "Read") == 0)
			*value += n;
	}
	fclose(f);
	return 0;
}

void throttle_read_counts(struct throttle_counts *counts)
{
	int ok;

	if (!cg.created)
		return;
	if (cg.version == 2)
		ok = sum_stat("io.stat", &counts->reads, "rios=") == 0 &&
		     sum_stat("io.stat", &counts->read_bytes, "rbytes=") == 0;
	else
		ok = sum_stat("blkio.throttle.io_serviced", &counts->reads,
			      NULL) == 0 &&
		     sum_stat("blkio.throttle.io_service_bytes",
			      &counts->read_bytes, NULL) == 0;
	counts->known = ok;
}
