/* --device-profile NAME for a diskemu drive (diskemu/profiles.tsv): the
 * trace's files are read from an emulated spinning disk. They must be on a
 * file system on a loop device over an image file; replay gives itself a
 * private mount namespace, starts diskemu on that image and mounts the
 * emulated device read-only over the file system's mount point there, so
 * that the trace's paths lead to the emulated disk. Nobody else sees the
 * mount; diskemu is stopped at exit (or dies with replay). docs/diskemu.md,
 * "From replay and startup-bench". */
#ifndef PAGETRACE_EMULATED_DISK_H
#define PAGETRACE_EMULATED_DISK_H

/* 1 when NAME is a diskemu profile (asks `diskemu --list-profiles`). */
int emulated_disk_has_profile(const char *name);

/* Starts the emulated disk under the file system holding PATH; returns 0,
 * or -1 after one error line (nothing left behind). */
int emulated_disk_begin(const char *profile, const char *path);

/* Stops diskemu and waits for its teardown; safe to call twice. */
void emulated_disk_end(void);

#endif
