/* /proc/self/mountinfo, one line at a time; see mountinfo.h. */
#include "mountinfo.h"
#include "escape.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

int mountinfo_parse_line(char *line, struct mount_entry *m)
{
	char *field[6], *dash, *save = NULL;
	unsigned int major_, minor_;

	/* The optional fields end at " - ", before the filesystem type. */
	dash = strstr(line, " - ");
	if (!dash)
		return -1;
	*dash = '\0';
	for (int i = 0; i < 6; i++) {
		field[i] = strtok_r(i ? NULL : line, " ", &save);
		if (!field[i])
			return -1;
	}
	if (sscanf(field[2], "%u:%u", &major_, &minor_) != 2)
		return -1;
	m->dev = makedev(major_, minor_);
	m->root = field[3];
	m->point = field[4];
	save = NULL;
	m->fstype = strtok_r(dash + 3, " ", &save);
	m->source = strtok_r(NULL, " ", &save);
	m->options = strtok_r(NULL, " \n", &save);
	if (!m->fstype || !m->source || !m->options)
		return -1;
	unescape_octal(m->root);
	unescape_octal(m->point);
	unescape_octal(m->source);
	return 0;
}

int for_each_mount(int (*fn)(const struct mount_entry *, void *), void *arg)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	int ret = 0;

	if (!f)
		return -1;
	while (ret == 0 && getline(&line, &cap, f) > 0) {
		struct mount_entry m;

		if (mountinfo_parse_line(line, &m) == 0)
			ret = fn(&m, arg);
	}
	free(line);
	fclose(f);
	return ret;
}

struct dev_search {
	dev_t dev;
	struct mount_copy *found;
};

static int copy_if_dev(const struct mount_entry *m, void *arg)
{
	struct dev_search *search = arg;

	if (m->dev != search->dev)
		return 0;
	snprintf(search->found->point, sizeof(search->found->point), "%s",
		 m->point);
	snprintf(search->found->source, sizeof(search->found->source), "%s",
		 m->source);
	snprintf(search->found->fstype, sizeof(search->found->fstype), "%s",
		 m->fstype);
	return 1;
}

int mount_of_dev(dev_t dev, struct mount_copy *m)
{
	struct dev_search search = {dev, m};

	return for_each_mount(copy_if_dev, &search);
}
