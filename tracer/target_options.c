// SPDX-License-Identifier: GPL-2.0
/*
 * target_options: -p, --cgroup and --container of trace, cachestat and
 * cachetop (target_options.h).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stddef.h>
#include "container.h"
#include "option.h"
#include "target_options.h"

enum { OPT_CGROUP = 0x200, OPT_CONTAINER };

#define CGROUP_AND_CONTAINER \
	{ "cgroup", OPT_CGROUP, "PATH", 0, "Only tasks in the cgroup PATH or below it, also " \
	  "those that join later (PATH: its directory, cgroup2 or a v1 controller's, or its " \
	  "path in the cgroup2 hierarchy as /proc/PID/cgroup says it)", 0 }, \
	{ "container", OPT_CONTAINER, "NAME", 0, "Only the container NAME (or ID) that docker " \
	  "or podman knows: its cgroup, as with --cgroup", 0 }

static const struct argp_option with_pid[] = {
	{ "pid", 'p', "PID", 0, "Only the running process PID (all its threads) and its "
	  "children", 0 },
	CGROUP_AND_CONTAINER,
	{},
};

static const struct argp_option without_pid[] = {
	CGROUP_AND_CONTAINER,
	{},
};

static error_t parse_target(int key, char *arg, struct argp_state *state)
{
	struct target *t = state->input;

	switch (key) {
	case 'p': t->pid = (pid_t)number_option("-p", arg, NULL, 1, INT_MAX); break;
	case OPT_CGROUP: t->cgroup_path = arg; break;
	case OPT_CONTAINER: t->container = arg; break;
	default: return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

const struct argp target_argp = { with_pid, parse_target, NULL, NULL, NULL, NULL, NULL };
const struct argp target_argp_no_pid = { without_pid, parse_target, NULL, NULL, NULL, NULL,
					 NULL };

int target_count(const struct target *t)
{
	return (t->pid != 0) + (t->cgroup_path != NULL) + (t->container != NULL);
}

int target_resolve_cgroup(struct target *t)
{
	return t->cgroup_path && cgroup_target_resolve(t->cgroup_path, &t->cgroup) ? -1 : 0;
}

int target_resolve_container(struct target *t)
{
	if (!t->container)
		return 0;
	if (container_cgroup_target(t->container, &t->cgroup))
		return -1;
	t->cgroup_path = t->cgroup.path;
	return 0;
}
