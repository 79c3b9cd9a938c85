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

/* target_options and enum target_key (from 0x200, above the tools' own keys:
 * argp's children share one key space): target_options.tsv's
 * (docs/option-tables.md). Its first row is -p; cachestat, which has no -p,
 * takes the rows after it. */
#include "target_options_table.h"

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

const struct argp target_argp = { target_options, parse_target, NULL, NULL, NULL, NULL, NULL };
const struct argp target_argp_no_pid = { target_options + 1, parse_target, NULL, NULL, NULL,
					 NULL, NULL };

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
