/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The target options that trace, cachestat and cachetop share: -p PID,
 * --cgroup PATH and --container NAME, one argp child parsing them into a
 * struct target (the parent hands it over as child input at ARGP_KEY_INIT),
 * and their resolution into the cgroup the kernel side recognises.
 */
#ifndef PAGETRACE_TARGET_OPTIONS_H
#define PAGETRACE_TARGET_OPTIONS_H

#include <argp.h>
#include <sys/types.h>
#include "cgroup.h"

struct target {
	pid_t pid;			/* -p, 0: not given */
	const char *cgroup_path;	/* --cgroup; the resolved directory once resolved */
	const char *container;		/* --container NAME|ID */
	struct cgroup_target cgroup;	/* --cgroup or --container, resolved */
};

/* -p, --cgroup and --container; the same without -p (cachestat). A bad PID
 * is a usage error in one line, exit status 2. */
extern const struct argp target_argp, target_argp_no_pid;

/* How many of -p, --cgroup and --container were given. */
int target_count(const struct target *t);
/* --cgroup's PATH into t->cgroup, when given: 0, or -1 said. */
int target_resolve_cgroup(struct target *t);
/* --container's running container into t->cgroup and t->cgroup_path, as
 * --cgroup's, when given: 0, or -1 said. */
int target_resolve_container(struct target *t);

#endif /* PAGETRACE_TARGET_OPTIONS_H */
