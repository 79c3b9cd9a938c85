/* diskemu: an emulated spinning disk. A FUSE file system (libfuse3) serves
 * an image file with direct_io, a loop device with direct I/O reads it, so
 * that every block request of the loop device reaches this daemon, which
 * answers it when the drive model (drive_model.h) says the disk would
 * have. See diskemu.8 and docs/diskemu.md. */
#ifndef PAGETRACE_DISKEMU_H
#define PAGETRACE_DISKEMU_H

#include <stdint.h>
#include <stdio.h>

#include "drive_model.h"

struct diskemu_options {
	const char *image;
	const char *profile;       /* default hdd-7200 */
	const char *profiles;      /* the profile table; NULL: the default */
	const char *mount;         /* --mount DIR, or NULL */
	const char *log;           /* --log FILE, or NULL */
	unsigned read_ahead_kb;    /* --read-ahead, the device's */
	int list, predict, json, quiet, exit_with_parent;
};

/* What the daemon served, for the summary and --json. */
struct diskemu_stats {
	uint64_t reads, bytes, buffered;
	double seek_s, rotation_s, transfer_s, busy_s;
};

/* The one daemon of a process (FUSE callbacks take no argument of ours). */
struct diskemu {
	struct diskemu_options opt;
	struct drive_model model;
	struct drive_state state;
	struct diskemu_stats stats;
	int image_fd;
	uint64_t image_size;
	double t0;                 /* CLOCK_MONOTONIC at start, seconds */
	FILE *log;
	char fuse_dir[64];
	char dev[32];
	int loop_fd;
};

int diskemu_parse_options(int argc, char **argv, struct diskemu_options *o);

/* Serves the image until a signal or the end of the FUSE connection;
 * returns the exit status. */
int diskemu_serve(struct diskemu *d);
/* One read, delayed by the model (the FUSE read callback's body). */
int diskemu_read(struct diskemu *d, char *buf, size_t size, uint64_t off);

/* --predict: the model's figures for the image's span. */
void diskemu_print_prediction(const struct diskemu *d);

#endif
