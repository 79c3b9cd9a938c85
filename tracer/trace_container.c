// SPDX-License-Identifier: GPL-2.0
/*
 * trace --container NAME [--wait] [--paths container]: the container's
 * cgroup becomes the traced cgroup (traced_tasks.bpf.h), found through
 * docker's or podman's inspect (lib/container.c); with --wait, once it
 * appears, while the programs are already attached, so that a container
 * started after trace is traced from its first process on. Its layer
 * directories and mounts become the path views of paths.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "container.h"
#include "errmsg.h"
#include "paths.h"
#include "trace_run.h"
#include "trace.skel.h"

static struct container container;
/* --wait: the runtime's events, for the id of the container as it is created. */
static int events_fd = -1;
static pid_t events_pid = -1;
/* --wait: the containers' cgroups before it, to see its own as it is made. */
static struct container_cgroups seen;
static bool seen_taken;

/* The runtime to wait on for a container neither knows yet: docker if its
 * daemon answers, else podman. */
static const char *runtime_running(void)
{
	return system("docker version >/dev/null 2>&1") == 0 ? "docker" : "podman";
}

/*
 * An id from the events, if one came: the container is being created. The
 * events' end (the runtime's client gone) closes them, and the wait
 * inspects the container by name instead.
 */
static bool created_id(char *id, size_t size)
{
	char line[256];
	ssize_t n = events_fd >= 0 ? read(events_fd, line, sizeof(line) - 1) : -1;

	if (n == 0 || (n < 0 && events_fd >= 0 && errno != EAGAIN && errno != EINTR)) {
		container_events_close(events_fd, events_pid);
		events_fd = -1, events_pid = -1;
	}
	if (n <= 0)
		return false;
	line[n] = '\0';
	n = (ssize_t)strcspn(line, "\n");
	if ((size_t)n >= size)
		n = (ssize_t)size - 1;
	memcpy(id, line, (size_t)n);
	id[n] = '\0';
	return n > 0;
}

/* Before loading: the container must be known and running, unless --wait. */
int container_target_check(void)
{
	char why[1200], what[300];
	int known = container_inspect(opts.target.container, &container, why, sizeof(why));

	snprintf(what, sizeof(what), "container %s", opts.target.container);
	if (known < 0)
		return errmsg(NULL, "out of memory"), -1;
	if (!known && !opts.wait)
		return errmsg(what, "%s", why), -1;
	if (known && !container.pid && !opts.wait)
		return errmsg(what, "not running (give --wait to trace its next start)"), -1;
	if (opts.wait && !container.pid) {
		seen_taken = container_cgroups_take(&seen) == 0;
		events_fd = container_events_open(container.runtime ? container.runtime :
						  runtime_running(), opts.target.container, &events_pid);
	}
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec t = { 0, ms * 1000000L };

	nanosleep(&t, NULL);
}

/* Found: trace its cgroup from now on. */
static int trace_cgroup(struct trace_bpf *skel, const char *dir)
{
	if (cgroup_target_resolve(dir, &opts.target.cgroup))
		return -1;
	skel->data->target_cgroup_subsys = opts.target.cgroup.subsys;
	skel->bss->target_cgroup_level = opts.target.cgroup.level;
	__atomic_store_n(&skel->bss->target_cgroup_id, opts.target.cgroup.id, __ATOMIC_RELEASE);
	opts.target.cgroup_path = opts.target.cgroup.path;
	container_events_close(events_fd, events_pid);
	events_fd = -1, events_pid = -1;	/* reaped: closed once */
	return 0;
}

/* With --paths container: paths as it sees them, from its layers (inspected by id if not yet). */
static int show_paths(void)
{
	char why[1200], id[sizeof(container.id)];

	if (!opts.paths_container)
		return 0;
	snprintf(id, sizeof(id), "%s", container.id);
	if (!container.ndirs) {
		container_free(&container);
		if (container_inspect(id, &container, why, sizeof(why)) <= 0)
			return errmsg(opts.target.container, "%s", why), -1;
	}
	set_path_views(container.dirs, container.ndirs);
	return 0;
}

static int target(struct trace_bpf *skel, const char *dir)
{
	return trace_cgroup(skel, dir) ? -1 : show_paths();
}

/*
 * A container cgroup made while waiting, the only one: traced at once,
 * before its command starts (the runtime's events can come 250 ms late,
 * podman's from its log file), then checked to be the container's by its
 * name (the runtime names a container as it creates it, before it makes
 * its cgroup); that inspect gives the layers too.
 */
static int target_new_cgroup(struct trace_bpf *skel, const char *dir, const char *id)
{
	char why[1200];
	int known;

	if (trace_cgroup(skel, dir))
		return -1;
	container_free(&container);
	known = container_inspect(opts.target.container, &container, why, sizeof(why));
	if (known <= 0)
		return errmsg(opts.target.container, "%s", known < 0 ? "out of memory" : why), -1;
	if (strcmp(container.id, id))
		return errmsg(opts.target.container, "another container (%.12s) started while trace "
			      "waited, and was traced in its place: trace it again", id), -1;
	return show_paths();
}

/* Found and traced: trace says so on stderr (TRACE_FOUND in packruntime.py). */
static int say_traced(int err)
{
	if (!err) {
		fprintf(stderr, "%s: Tracing container %s.\n", TOOL, opts.target.container);
		fflush(stderr);
	}
	return err;
}

/*
 * After attaching: find the container's cgroup: the one container cgroup
 * made since trace started (target_new_cgroup()), or the one of the id
 * the runtime's events give, or asking the runtime again every 50 ms
 * until it knows the container; looking every millisecond. 0 when found
 * (said: say_traced()); 1 when *stop became true first; -1 on an error (said).
 */
int container_target_wait(struct trace_bpf *skel, volatile sig_atomic_t *stop)
{
	char dir[PATH_MAX], why[1200], id[65];
	int known = container.id[0] != 0;

	for (unsigned long i = 0; !*stop; i++) {
		if (created_id(container.id, sizeof(container.id)))
			known = 1;
		if (known && container_cgroup_dir(&container, dir, sizeof(dir)))
			return say_traced(target(skel, dir));
		if (!known && seen_taken && container_new_cgroup(&seen, dir, sizeof(dir), id) == 1)
			return say_traced(target_new_cgroup(skel, dir, id));
		if (events_fd < 0 && i % 50 == 0) {
			container_free(&container);
			known = container_inspect(opts.target.container, &container, why, sizeof(why));
			if (known < 0)
				return errmsg(NULL, "out of memory"), -1;
		}
		sleep_ms(1);
	}
	return 1;
}

void container_target_free(void)
{
	container_cgroups_free(&seen);
	container_events_close(events_fd, events_pid);
	events_fd = -1, events_pid = -1;
	container_free(&container);
}
