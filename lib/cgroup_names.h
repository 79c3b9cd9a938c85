/* Names of cgroup2 cgroups for the cache tools' rows: a cgroup's path and
 * its container's name, asked once per cgroup id, forgotten when it is
 * gone. cachetop asks and waits; the exporter asks without waiting. */
#ifndef PAGETRACE_CGROUP_NAMES_H
#define PAGETRACE_CGROUP_NAMES_H

#include <stdbool.h>

struct cgroup_name {
	unsigned long long id;
	char *path;		/* in the cgroup2 hierarchy; "//gone/COMPONENT" (the table's) */
	char container[256];	/* "" when no runtime names it */
	bool asking;		/* its container's name not known yet */
};

/*
 * Names the cgroup2 cgroup @id, once: later calls give the same. @component,
 * if not NULL, is its directory's name, for one that is gone already (its
 * path is then "//gone/COMPONENT"). NULL when out of memory, or when it is
 * gone and @component is NULL (not remembered: it may be met again).
 */
const struct cgroup_name *name_cgroup(unsigned long long id, const char *component);

/*
 * As name_cgroup(@id, NULL), without waiting for a container runtime: a
 * path that names a container is asked about by a thread of its own
 * (started at the first such call); one whose ask timed out is not asked
 * for a minute. 1 when the name is known (the runtime answered or failed
 * to); 0 while the runtime is being asked; -1 when @id is gone or memory
 * ran out.
 */
int name_cgroup_nowait(unsigned long long id);
/* The name of @id when known (name_cgroup_nowait gave 1), else NULL; valid
 * until the next call of name_cgroup* or forget_gone_cgroups. */
const struct cgroup_name *cgroup_name_known(unsigned long long id);

/* Forgets the names of cgroups that are gone (one walk of the cgroup2
 * hierarchy): a tool that runs for days must not keep a name for every
 * cgroup it ever met. */
void forget_gone_cgroups(void);

/* Stops the asking thread (waits for the runtime it is asking, bounded by
 * CONTAINER_ASK_S) and forgets every name. */
void cgroup_names_close(void);

#endif
