// SPDX-License-Identifier: GPL-2.0
/*
 * Containers through their runtime's own inspect: `docker inspect` (the
 * docker CLI, with DOCKER_HOST if set), else `podman inspect`, run without
 * a shell. What pagetrace needs is asked with one Go template: the id, the
 * first process, the storage driver's layer directories (overlay: each
 * lower layer and the upper one show their files at "/" in the container)
 * and the mounts (bind mounts: source -> destination).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "array.h"
#include "container.h"
#include "cgroup.h"
#include "clock.h"
#include "errmsg.h"
#include "mountinfo.h"

static const char TEMPLATE[] =
	"{{.Id}}\n{{.State.Pid}}\n"
	"{{with .GraphDriver.Data}}{{range $k, $v := .}}{{if or (eq $k \"LowerDir\") "
	"(eq $k \"UpperDir\")}}{{$v}}:{{end}}{{end}}{{end}}\n"
	"{{range .Mounts}}{{.Source}}\t{{.Destination}}\n{{end}}";

/* Reads what is ready on @fd into @buf (NUL-terminated, at most @size - 1
 * bytes, the rest discarded); false at its end. */
static bool drain(int fd, char *buf, size_t size, size_t *used)
{
	char sink[4096];
	bool room = *used + 1 < size;
	ssize_t n = room ? read(fd, buf + *used, size - *used - 1) : read(fd, sink, sizeof(sink));

	if (n > 0 && room)
		*used += n;
	buf[*used] = '\0';
	return n > 0 || (n < 0 && errno == EINTR);
}

/* Runs ARGV for at most CONTAINER_ASK_S seconds (then kills it: a runtime
 * whose daemon hangs must not hang the tool); its stdout in OUT
 * (NUL-terminated), its stderr's first line in ERR, or to /dev/null when
 * ERR is NULL (then one pipe: a tool asking for every container a second
 * holds one descriptor for it, not two). The exit status, or -1 when it
 * could not run or was killed. */
static int run_capture(char *const argv[], char *out, size_t out_size, char *err, size_t err_size)
{
	int outp[2], errp[2] = { -1, -1 }, status, nfds = err ? 2 : 1, open_fds = nfds;
	struct pollfd fds[2];
	size_t used[2] = { 0, 0 };
	uint64_t deadline = monotonic_ns() + CONTAINER_ASK_S * 1000000000ull;
	pid_t pid;

	out[0] = '\0';
	if (err)
		err[0] = '\0';
	if (pipe2(outp, O_CLOEXEC))
		return -1;
	if (err && pipe2(errp, O_CLOEXEC)) {
		close(outp[0]);
		close(outp[1]);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		sigset_t none;
		int null = err ? -1 : open("/dev/null", O_WRONLY | O_CLOEXEC);

		/* the runtime starts as from a shell: no signal blocked or ignored */
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		dup2(outp[1], 1);
		dup2(err ? errp[1] : null, 2);
		execvp(argv[0], argv);
		if (err)
			dprintf(2, "%s: not found\n", argv[0]);
		_exit(127);
	}
	close(outp[1]);
	if (err)
		close(errp[1]);
	fds[0] = (struct pollfd){ .fd = outp[0], .events = POLLIN };
	fds[1] = (struct pollfd){ .fd = errp[0], .events = POLLIN };
	while (pid > 0 && open_fds && monotonic_ns() < deadline) {
		if (poll(fds, nfds, (int)((deadline - monotonic_ns()) / 1000000) + 1) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < nfds; i++)
			if (fds[i].fd >= 0 && fds[i].revents &&
			    !drain(fds[i].fd, i ? err : out, i ? err_size : out_size, &used[i])) {
				fds[i].fd = -1;
				open_fds--;
			}
	}
	if (err) {
		err[strcspn(err, "\n")] = '\0';
		close(errp[0]);
	}
	close(outp[0]);
	if (pid > 0 && open_fds)
		kill(pid, SIGKILL);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) && !open_fds ? WEXITSTATUS(status) : -1;
}

static int add_dir(struct container *c, const char *host, const char *inside)
{
	if (!*host || c->ndirs >= CONTAINER_MAX_DIRS)
		return 0;
	c->dirs[c->ndirs].host = strdup(host);
	c->dirs[c->ndirs].inside = strdup(inside);
	if (!c->dirs[c->ndirs].host || !c->dirs[c->ndirs].inside)
		return -1;
	c->ndirs++;
	return 0;
}

/* The template's answer, line by line. */
static int parse(char *text, struct container *c)
{
	char *save, *line = strtok_r(text, "\n", &save), *layers, *tab;

	if (!line)
		return 0;
	snprintf(c->id, sizeof(c->id), "%s", line);
	c->pid = (line = strtok_r(NULL, "\n", &save)) ? atoi(line) : 0;
	layers = strtok_r(NULL, "\n", &save);
	for (char *s2, *dir = layers ? strtok_r(layers, ":", &s2) : NULL; dir; dir = strtok_r(NULL, ":", &s2))
		if (add_dir(c, dir, ""))
			return -1;
	while ((line = strtok_r(NULL, "\n", &save)) && (tab = strchr(line, '\t'))) {
		*tab = '\0';
		if (add_dir(c, line, strcmp(tab + 1, "/") ? tab + 1 : ""))
			return -1;
	}
	return 1;
}

int container_inspect(const char *name, struct container *c, char *why, size_t why_size)
{
	static const char *const runtimes[] = { "docker", "podman" };
	char out[65536], err[2][512];

	memset(c, 0, sizeof(*c));
	for (int i = 0; i < 2; i++) {
		char *argv[] = { (char *)runtimes[i], "inspect", "--type", "container", "--format",
				 (char *)TEMPLATE, (char *)name, NULL };

		if (run_capture(argv, out, sizeof(out), err[i], sizeof(err[i])) == 0 && out[0]) {
			c->runtime = runtimes[i];
			return parse(out, c);
		}
	}
	snprintf(why, why_size, "docker: %s; podman: %s", err[0][0] ? err[0] : "does not know it",
		 err[1][0] ? err[1] : "does not know it");
	return 0;
}

/* The mount point of the cgroup2 hierarchy, or of a v1 controller's. */
struct hierarchy {
	const char *controller;	/* NULL: cgroup2 */
	char point[PATH_MAX];
};

static int find_hierarchy(const struct mount_entry *m, void *arg)
{
	struct hierarchy *h = arg;
	char opts[1024], *save, *o;

	if (strcmp(m->root, "/"))
		return 0;
	if (!h->controller && !strcmp(m->fstype, "cgroup2")) {
		snprintf(h->point, sizeof(h->point), "%s", m->point);
		return 1;
	}
	if (!h->controller || strcmp(m->fstype, "cgroup"))
		return 0;
	snprintf(opts, sizeof(opts), "%s", m->options);
	for (o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save))
		if (!strcmp(o, h->controller)) {
			snprintf(h->point, sizeof(h->point), "%s", m->point);
			return 1;
		}
	return 0;
}

static bool hierarchy_point(const char *controller, char *point, size_t size)
{
	struct hierarchy h = { .controller = controller };

	if (for_each_mount(find_hierarchy, &h) <= 0)
		return false;
	snprintf(point, size, "%s", h.point);
	return true;
}

static bool is_dir(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

/* From /proc/PID/cgroup: the cgroup2 line when not the root, else memory's. */
static bool cgroup_of_pid(pid_t pid, char *dir, size_t size)
{
	char path[64], line[PATH_MAX], point[PATH_MAX], memory[PATH_MAX] = "";
	bool found = false;
	FILE *file;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	file = fopen(path, "re");
	if (!file)
		return false;
	while (!found && fgets(line, sizeof(line), file)) {
		char *rel = strchr(line, ':') ? strchr(strchr(line, ':') + 1, ':') : NULL;

		if (!rel)
			continue;
		rel[strcspn(rel, "\n")] = '\0';
		if (!strncmp(line, "0::", 3) && strcmp(rel + 1, "/") && hierarchy_point(NULL, point, sizeof(point))) {
			snprintf(dir, size, "%s%s", point, rel + 1);
			found = is_dir(dir);
		} else if (strstr(line, ":memory:") && hierarchy_point("memory", point, sizeof(point))) {
			snprintf(memory, sizeof(memory), "%s%s", point, rel + 1);
		}
	}
	fclose(file);
	if (!found && memory[0] && is_dir(memory))
		found = snprintf(dir, size, "%s", memory) > 0;
	return found;
}

int container_events_open(const char *runtime, const char *name, pid_t *pid)
{
	char filter[300];
	char *argv[] = { (char *)runtime, "events", "--filter", filter, "--filter", "event=create",
			 "--format", "{{.ID}}", NULL };
	int fds[2];

	snprintf(filter, sizeof(filter), "container=%s", name);
	if (pipe2(fds, O_CLOEXEC))
		return -1;
	*pid = fork();
	if (*pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(fds[1], 1);
		dup2(null, 2);
		dup2(null, 0);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	if (*pid < 0) {
		close(fds[0]);
		return -1;
	}
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	return fds[0];
}

void container_events_close(int fd, pid_t pid)
{
	if (fd >= 0)
		close(fd);
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
}

void container_free(struct container *c)
{
	for (int i = 0; i < c->ndirs; i++) {
		free(c->dirs[i].host);
		free(c->dirs[i].inside);
	}
	c->ndirs = 0;
}

/* The first run of 64 hex digits in the last component of PATH, in ID. */
static bool container_id_of(const char *path, char id[65])
{
	const char *p = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t run = 0;

	for (; *p; p++) {
		run = isxdigit((unsigned char)*p) ? run + 1 : 0;
		if (run == 64 && !isxdigit((unsigned char)p[1])) {
			memcpy(id, p - 63, 64);
			id[64] = '\0';
			return true;
		}
	}
	return false;
}

bool container_id_in_cgroup(const char *cgroup)
{
	char id[65];

	return container_id_of(cgroup, id);
}

bool container_name_of_cgroup(const char *cgroup, char *name, size_t size)
{
	static const char *const runtimes[] = { "docker", "podman" };
	char id[65], out[512];

	if (!container_id_of(cgroup, id))
		return false;
	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++) {
		char *argv[] = { (char *)runtimes[i], "inspect", "--format", "{{.Name}}", id, NULL };

		if (run_capture(argv, out, sizeof(out), NULL, 0) || !out[0])
			continue;
		out[strcspn(out, "\n")] = '\0';
		snprintf(name, size, "%s", out[0] == '/' ? out + 1 : out);
		return name[0] != '\0';
	}
	return false;
}

/*
 * Where docker and podman put their containers' cgroups, cgroupfs and
 * systemd drivers alike: /docker/ID, /system.slice/docker-ID.scope,
 * /libpod_parent/libpod-ID, /machine.slice/libpod-ID.scope.
 */
static const char *const CONTAINER_PARENTS[] = { "/docker", "/system.slice", "/libpod_parent",
						 "/machine.slice" };

static bool seen_id(const struct container_cgroups *seen, const char *id)
{
	for (size_t i = 0; i < seen->n; i++)
		if (!strcmp(seen->ids[i], id))
			return true;
	return false;
}

/*
 * Calls @each(dir, id, arg) for every container cgroup there is now, in
 * the cgroup2 hierarchy and memory's, until it returns non-zero; returns
 * that, or 0.
 */
static int for_each_container_cgroup(int (*each)(const char *dir, const char *id, void *arg),
				     void *arg)
{
	static const char *const hierarchies[] = { NULL, "memory" };
	char point[PATH_MAX], parent[PATH_MAX], dir[PATH_MAX], id[65];
	int ret = 0;

	for (int h = 0; h < 2 && !ret; h++) {
		if (!hierarchy_point(hierarchies[h], point, sizeof(point)))
			continue;
		for (size_t p = 0; p < sizeof(CONTAINER_PARENTS) / sizeof(*CONTAINER_PARENTS) && !ret; p++) {
			DIR *d;
			struct dirent *e;

			snprintf(parent, sizeof(parent), "%s%s", point, CONTAINER_PARENTS[p]);
			d = opendir(parent);
			while (d && !ret && (e = readdir(d)))
				if (e->d_type == DT_DIR && container_id_of(e->d_name, id) &&
				    snprintf(dir, sizeof(dir), "%s/%s", parent, e->d_name) < (int)sizeof(dir))
					ret = each(dir, id, arg);
			if (d)
				closedir(d);
		}
	}
	return ret;
}

struct cgroup_of_id {
	const char *id;
	char *dir;
	size_t size;
};

static int is_the_id(const char *dir, const char *id, void *arg)
{
	struct cgroup_of_id *want = arg;

	return !strcmp(id, want->id) && snprintf(want->dir, want->size, "%s", dir) < (int)want->size;
}

bool container_cgroup_dir(const struct container *c, char *dir, size_t size)
{
	struct cgroup_of_id want = { .id = c->id, .dir = dir, .size = size };

	if (c->pid > 0 && cgroup_of_pid(c->pid, dir, size))
		return true;
	return for_each_container_cgroup(is_the_id, &want) > 0;
}

int container_cgroup_target(const char *name, struct cgroup_target *target)
{
	struct container c;
	char why[1200], what[300], dir[PATH_MAX];
	int known = container_inspect(name, &c, why, sizeof(why));

	int ret = -1;

	snprintf(what, sizeof(what), "container %s", name);
	if (known < 0)
		return errmsg(NULL, "out of memory"), -1;
	if (!known)
		errmsg(what, "%s", why);
	else if (!c.pid)
		errmsg(what, "not running");
	else if (!container_cgroup_dir(&c, dir, sizeof(dir)))
		errmsg(what, "its cgroup is not in /proc/%d/cgroup", (int)c.pid);
	else
		ret = cgroup_target_resolve(dir, target);
	if (known)
		container_free(&c);
	return ret;
}

static int take_one(const char *dir, const char *id, void *arg)
{
	struct container_cgroups *seen = arg;

	(void)dir;
	if (seen_id(seen, id))
		return 0;
	if (array_reserve(&seen->ids, &seen->cap, seen->n + 1,
			  sizeof(*seen->ids)))
		return -1;
	memcpy(seen->ids[seen->n++], id, 65);
	return 0;
}

int container_cgroups_take(struct container_cgroups *seen)
{
	seen->ids = NULL;
	seen->n = seen->cap = 0;
	return for_each_container_cgroup(take_one, seen);
}

struct new_cgroup {
	const struct container_cgroups *seen;
	char *dir, *id;
	size_t dir_size;
	int found;
};

static int find_new(const char *dir, const char *id, void *arg)
{
	struct new_cgroup *n = arg;

	if (seen_id(n->seen, id) || (n->found && !strcmp(n->id, id)))
		return 0;
	if (n->found++)
		return 1;	/* a second one: which is ours is not known */
	snprintf(n->dir, n->dir_size, "%s", dir);
	memcpy(n->id, id, 65);
	return 0;
}

int container_new_cgroup(const struct container_cgroups *seen, char *dir, size_t size, char id[65])
{
	struct new_cgroup n = { .seen = seen, .dir = dir, .id = id, .dir_size = size };

	for_each_container_cgroup(find_new, &n);
	return n.found > 1 ? 2 : n.found;
}

void container_cgroups_free(struct container_cgroups *seen)
{
	free(seen->ids);
	seen->ids = NULL;
	seen->n = seen->cap = 0;
}
