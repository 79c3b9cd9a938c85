/* --throttle and --device-profile: the measured run in a cgroup whose
 * blk-throttle limits (cgroup v2 io.max, else v1 blkio.throttle.*) cap the
 * reads of every block device the trace's files are on. See
 * docs/replay.md, "Slow storage". */
#ifndef PAGETRACE_THROTTLE_H
#define PAGETRACE_THROTTLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Disks one run can throttle (a trace rarely spans more than a few). */
#define THROTTLE_MAX_DISKS 64

struct throttle_limits {
	uint64_t riops;           /* read I/Os per second; 0: no throttle */
	uint64_t rbps;            /* read bytes per second; 0: unlimited */
	const char *profile;      /* --device-profile NAME, or NULL */
};

/* What the kernel counted in the cgroup before it was removed. */
struct throttle_counts {
	uint64_t reads, read_bytes;
	int known;
};

/* "riops=N[,rbps=SIZE]"; returns 0, or -1 with *WHY set. */
int throttle_parse(const char *text, struct throttle_limits *lim,
		   const char **why);
/* A named profile; -1 when NAME is none of them. */
int throttle_profile(const char *name, struct throttle_limits *lim);
/* The profile names, comma-separated, for messages. */
const char *throttle_profile_names(void);

/* The whole disk under DEV (a file's st_dev) that blk-throttle can limit;
 * returns 0, or -1 after a `replay: PATH: cannot throttle: why` line. */
int throttle_disk_of(dev_t dev, const char *path, dev_t *disk);

struct replay;
/* throttle_begin on the disks of every file replay opened. */
int throttle_files(struct replay *r);

/* Creates the cgroup, sets the limits on DISKS, moves this process into
 * it and arranges for its removal on exit, SIGINT, SIGTERM and SIGHUP.
 * Returns 0, or -1 after one error line (nothing is left behind). */
int throttle_begin(const struct throttle_limits *lim, const dev_t *disks,
		   size_t n_disks);
/* --cgroup DIR: moves this process into the existing cgroup DIR (of any
 * hierarchy, v1 or v2), which is left as it is at the end. Returns 0, or
 * -1 after a `replay: DIR: cannot join the cgroup: why` line. */
int throttle_join(const char *dir);
/* Reads the cgroup's read counters of the throttled disks. */
void throttle_read_counts(struct throttle_counts *counts);
/* Moves the process back and removes the cgroup; safe to call twice. */
void throttle_end(void);
/* "v1" or "v2": the hierarchy used, once throttle_begin succeeded. */
const char *throttle_hierarchy(void);
/* The "throttle" member of --json (null without --throttle), and the
 * summary line. */
void throttle_print_json(const struct replay *r);
void throttle_print_summary(const struct replay *r);

#endif
