/* A cgroup named by its directory, as the tracer's kernel side recognises
 * it (tracer/traced_tasks.bpf.h): for --cgroup of trace, cachestat, cachetop. */
#ifndef PAGETRACE_CGROUP_H
#define PAGETRACE_CGROUP_H

#include <stdbool.h>
#include <linux/types.h>

struct cgroup_target {
	__u64 id;		/* the cgroup's id: its kernfs node id, the directory's inode */
	__u32 level;		/* its depth below its hierarchy's root (the root: 0) */
	int subsys;		/* v1: a controller's id (/proc/cgroups' line order); v2: -1 */
	char path[4096];	/* the directory, resolved */
};

/*
 * Resolves PATH: a cgroup directory (cgroup2, or a v1 hierarchy with a
 * controller), or a path inside the cgroup2 hierarchy as /proc/PID/cgroup
 * gives it ("/system.slice/x.service"). 0, or -1 said on stderr as
 * "TOOL: cgroup PATH: why".
 */
int cgroup_target_resolve(const char *path, struct cgroup_target *target);

/* Is the cgroup still there (it goes when its last task has gone and its
 * manager removed it)? */
bool cgroup_target_exists(const struct cgroup_target *target);

/*
 * The path in the cgroup2 hierarchy ("/system.slice/x.service", "/" for its
 * root) of the cgroup whose id is ID, as bpf_get_current_cgroup_id() gives
 * it: the directory whose inode is ID. false when there is none (any more).
 */
bool cgroup_path_of_id(__u64 id, char *path, size_t size);

/*
 * The ids of every cgroup of the cgroup2 hierarchy now, sorted, into *@ids
 * (malloc'd): their number, or -1 (no cgroup2 hierarchy, out of memory).
 * One walk of the tree, for tools that run for days and must drop what
 * they keep of cgroups that are gone.
 */
long cgroup_live_ids(__u64 **ids);

/* Is @id among the @n sorted @ids? */
bool cgroup_id_in(const __u64 *ids, long n, __u64 id);

#endif
