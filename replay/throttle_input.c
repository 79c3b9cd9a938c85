/* What --throttle needs to know before any cgroup exists: the limits
 * (riops=N[,rbps=SIZE] or a named profile), the mounts, and the whole disk
 * under each file, which is what blk-throttle accepts. */
#include "replay.h"
#include "throttle.h"
#include "size.h"
#include "mountinfo.h"
#include "device_profiles.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The profiles: analysis/pagetrace/device-profiles.tsv, the one table that
 * the Python tools read too; docs/replay.md, "Slow storage", has where their
 * numbers come from. */
static const struct profile {
	const char *name;
	uint64_t riops, rbps;
} profiles[] = {
	DEVICE_PROFILE_ROWS
};

#define N_PROFILES (sizeof(profiles) / sizeof(profiles[0]))

int throttle_profile(const char *name, struct throttle_limits *lim)
{
	size_t i;

	for (i = 0; i < N_PROFILES; i++)
		if (strcmp(name, profiles[i].name) == 0) {
			lim->riops = profiles[i].riops;
			lim->rbps = profiles[i].rbps;
			lim->profile = profiles[i].name;
			return 0;
		}
	return -1;
}

const char *throttle_profile_names(void)
{
	return DEVICE_PROFILE_NAMES;
}

static int parse_item(char *item, struct throttle_limits *lim,
		      const char **why)
{
	char *eq = strchr(item, '=');

	if (!eq) {
		*why = "expected KEY=VALUE items: riops=N[,rbps=SIZE]";
		return -1;
	}
	*eq = '\0';
	if (strcmp(item, "riops") == 0) {
		if (parse_number(eq + 1, NULL, 1, UINT64_MAX,
				 &lim->riops) < 0) {
			*why = "riops must be a whole number of reads per "
			       "second, at least 1";
			return -1;
		}
	} else if (strcmp(item, "rbps") == 0) {
		if (parse_number(eq + 1, &size_units, 1, UINT64_MAX,
				 &lim->rbps) < 0) {
			*why = "rbps must be a positive size in bytes per "
			       "second (K, M, G suffixes)";
			return -1;
		}
	} else {
		*why = "unknown key: the keys are riops and rbps";
		return -1;
	}
	return 0;
}

int throttle_parse(const char *text, struct throttle_limits *lim,
		   const char **why)
{
	char *copy = strdup(text), *item, *save = NULL;
	int ret = 0;

	if (!copy) {
		*why = "out of memory";
		return -1;
	}
	lim->riops = lim->rbps = 0;
	lim->profile = NULL;
	for (item = strtok_r(copy, ",", &save); item && ret == 0;
	     item = strtok_r(NULL, ",", &save))
		ret = parse_item(item, lim, why);
	if (ret == 0 && lim->riops == 0) {
		*why = "riops=N is required (reads per second, at least 1)";
		ret = -1;
	}
	free(copy);
	return ret;
}

/* --- the disk under a file ------------------------------------------- */

/* A filesystem on an anonymous device (major 0: tmpfs, overlay, btrfs,
 * network filesystems): its mount source, when that is a block device
 * node (btrfs on one device), is the device; otherwise there is none. */
static int anonymous_dev_source(dev_t dev, const char *path, dev_t *block)
{
	struct mount_copy want;
	struct stat st;
	int found = mount_of_dev(dev, &want) > 0;

	if (found && want.source[0] == '/' &&
	    stat(want.source, &st) == 0 && S_ISBLK(st.st_mode)) {
		*block = st.st_rdev;
		return 0;
	}
	if (!found)
		errmsg(path, "cannot throttle: its filesystem (device %u:%u) "
		       "is not in /proc/self/mountinfo", major(dev),
		       minor(dev));
	else if (strcmp(want.fstype, "overlay") == 0)
		errmsg(path, "cannot throttle: it is on an overlay "
		       "filesystem, whose reads go to its layers' "
		       "filesystems; blk-throttle limits one block device, "
		       "and replay does not resolve which layer holds a file");
	else
		errmsg(path, "cannot throttle: it is on %s (%s), which has no "
		       "block device for blk-throttle to limit", want.fstype,
		       want.source);
	return -1;
}

/* Reads "MAJ:MIN" from a sysfs dev file. */
static int read_dev_file(const char *file, dev_t *dev)
{
	unsigned int major_, minor_;
	FILE *f = fopen(file, "re");
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "%u:%u", &major_, &minor_);
	fclose(f);
	if (n != 2)
		return -1;
	*dev = makedev(major_, minor_);
	return 0;
}

/* blk-throttle refuses partitions (the kernel's blkcg_conf_open_bdev()
 * answers ENODEV): a partition is limited through its whole disk, its
 * parent in sysfs. */
static int whole_disk(dev_t dev, const char *path, dev_t *disk)
{
	char sys[96], file[PATH_MAX + 16], real[PATH_MAX];

	snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u", major(dev),
		 minor(dev));
	if (access(sys, F_OK) < 0) {
		errmsg(path, "cannot throttle: device %u:%u is not a block "
		       "device (no %s)", major(dev), minor(dev), sys);
		return -1;
	}
	snprintf(file, sizeof(file), "%s/partition", sys);
	if (access(file, F_OK) < 0) {
		*disk = dev;
		return 0;
	}
	if (!realpath(sys, real)) {
		errmsg(path, "cannot throttle: %s: %s", sys,
		       errmsg_strerror(errno));
		return -1;
	}
	snprintf(file, sizeof(file), "%s/../dev", real);
	if (read_dev_file(file, disk) < 0) {
		errmsg(path, "cannot throttle: partition %u:%u: its disk "
		       "cannot be read from %s", major(dev), minor(dev), file);
		return -1;
	}
	return 0;
}

int throttle_disk_of(dev_t dev, const char *path, dev_t *disk)
{
	dev_t block = dev;

	if (major(dev) == 0 && anonymous_dev_source(dev, path, &block) < 0)
		return -1;
	return whole_disk(block, path, disk);
}
