/* The one parser of /proc/self/mountinfo (proc(5)), for the tracer's mount
 * table (tracer/paths.c) and replay's mount of a file's device
 * (replay/throttle_input.c, replay/emulated_disk.c). */
#ifndef PAGETRACE_MOUNTINFO_H
#define PAGETRACE_MOUNTINFO_H

#include <limits.h>
#include <sys/types.h>

/* One line of /proc/self/mountinfo, unescaped; the strings point into the
 * line being read and last only for the call of the callback. */
struct mount_entry {
	dev_t dev;
	char *root, *point, *fstype, *source, *options;
};

/* Splits one mountinfo LINE (modified in place) into M; 0, or -1 when it
 * is malformed. */
int mountinfo_parse_line(char *line, struct mount_entry *m);

/* Calls FN for each mount until it returns non-zero; returns that, or -1
 * with errno set when mountinfo cannot be read. */
int for_each_mount(int (*fn)(const struct mount_entry *, void *), void *arg);

/* The first mount of a device, its strings copied (cut to these sizes). */
struct mount_copy {
	char point[PATH_MAX], source[PATH_MAX], fstype[64];
};

/* Finds the first mount of device DEV: 1 with *M filled, 0 when DEV is not
 * mounted, -1 with errno set when mountinfo cannot be read. */
int mount_of_dev(dev_t dev, struct mount_copy *m);

#endif
