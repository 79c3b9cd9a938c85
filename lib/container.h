/* A container named by NAME or ID, as docker or podman (whichever knows
 * it) inspects it: its cgroup, and its image's layer directories (for
 * paths as the container sees them). For trace --container. */
#ifndef PAGETRACE_CONTAINER_H
#define PAGETRACE_CONTAINER_H

#include <stdbool.h>
#include <sys/types.h>

#define CONTAINER_MAX_DIRS 64
#define CONTAINER_ASK_S 10	/* a runtime's answer waited for at most this long */

/* A host directory seen at another path in the container. */
struct container_dir {
	char *host, *inside;
};

struct container {
	const char *runtime;	/* "docker" or "podman" */
	char id[128];
	pid_t pid;		/* its first process, 0 while not running */
	struct container_dir dirs[CONTAINER_MAX_DIRS];	/* layers -> "/", mounts */
	int ndirs;
};

/*
 * Asks docker, then podman, about NAME. 1 when one knows it; 0 when neither
 * does (WHY says what each said); -1 when out of memory.
 */
int container_inspect(const char *name, struct container *c, char *why, size_t why_size);

/*
 * The cgroup directory of container C, in DIR: from its first process's
 * /proc/PID/cgroup when it runs (the cgroup2 one, else its memory
 * controller's), else where docker and podman make it, if it is there yet.
 * true when found.
 */
bool container_cgroup_dir(const struct container *c, char *dir, size_t size);

/*
 * --container NAME of cachestat and cachetop: the cgroup of the running
 * container NAME, resolved into TARGET as --cgroup's. 0; -1 when no runtime
 * knows it, it does not run, or its cgroup is not found, said on stderr in
 * one line ("container NAME: why").
 */
struct cgroup_target;
int container_cgroup_target(const char *name, struct cgroup_target *target);

/*
 * `RUNTIME events` for containers named NAME being created, their ids one a
 * line, on the returned fd (non-blocking); *PID is the child to stop with
 * container_events_close(). -1 when it cannot start. The id arrives as the
 * runtime creates the container, before it starts it: waiting for it beats
 * asking inspect again and again, as a container can start and exit
 * within 0.1 s of being created.
 */
int container_events_open(const char *runtime, const char *name, pid_t *pid);
void container_events_close(int fd, pid_t pid);

/*
 * The name docker or podman gives the container whose cgroup is CGROUP (a
 * path in which the container's 64-hex-digit id names the last component:
 * /docker/ID, /system.slice/docker-ID.scope, libpod-ID...), in NAME. false
 * when the path holds no such id or no runtime knows it.
 */
bool container_name_of_cgroup(const char *cgroup, char *name, size_t size);
/* Does the last component of CGROUP hold a container's id? */
bool container_id_in_cgroup(const char *cgroup);

/*
 * The ids of the containers' cgroups there are now (where docker and
 * podman make them), so that one made later is told apart. 0, or -1 when
 * out of memory.
 */
struct container_cgroups {
	char (*ids)[65];
	size_t n, cap;
};
int container_cgroups_take(struct container_cgroups *seen);
/*
 * A container cgroup made since @seen was taken: 1 with its directory in
 * @dir and its id in @id; 0 when there is none; 2 when there are several
 * (which one is the container waited for is not known).
 */
int container_new_cgroup(const struct container_cgroups *seen, char *dir, size_t size, char id[65]);
void container_cgroups_free(struct container_cgroups *seen);

void container_free(struct container *c);

#endif
