// SPDX-License-Identifier: GPL-2.0
/*
 * The table of cgroup names (cgroup_names.h). Invariants: only the tool's
 * main thread adds, removes or moves entries (name_cgroup*,
 * forget_gone_cgroups); the asking thread only fills the container name of
 * an entry with .asking set and then clears .asking, under the lock. An
 * entry's fields are read outside the lock only by the main thread and
 * only once .asking is clear, when nothing writes them any more.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "array.h"
#include "cgroup.h"
#include "cgroup_names.h"
#include "clock.h"
#include "container.h"

static struct cgroup_name *names;
static size_t nr_names, names_cap;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_t asker;
static bool asker_running, asker_stop;

static struct cgroup_name *find(unsigned long long id)
{
	for (size_t i = 0; i < nr_names; i++)
		if (names[i].id == id)
			return &names[i];
	return NULL;
}

/* A new entry for @id with its path, not yet counted in nr_names; NULL when
 * out of memory or gone (see name_cgroup). */
static struct cgroup_name *new_entry(unsigned long long id, const char *component)
{
	struct cgroup_name *name;
	char path[4096];

	if (!cgroup_path_of_id(id, path, sizeof(path))) {
		if (!component || !component[0])
			return NULL;	/* not remembered: the id may be met again */
		/* gone already: its path is lost, its name is not */
		snprintf(path, sizeof(path), "//gone/%s", component);
	}
	if (array_reserve(&names, &names_cap, nr_names + 1, sizeof(*names)))
		return NULL;
	name = &names[nr_names];
	memset(name, 0, sizeof(*name));
	name->id = id;
	name->path = strdup(path);
	return name->path ? name : NULL;
}

const struct cgroup_name *name_cgroup(unsigned long long id, const char *component)
{
	struct cgroup_name *name = find(id);

	if (name)
		return name;
	name = new_entry(id, component);
	if (!name)
		return NULL;
	container_name_of_cgroup(name->path, name->container, sizeof(name->container));
	nr_names++;
	return name;
}

/* The first entry still .asking, copied into @path; its id, or 0. */
static unsigned long long next_question(char *path, size_t size)
{
	for (size_t i = 0; i < nr_names; i++)
		if (names[i].asking) {
			snprintf(path, size, "%s", names[i].path);
			return names[i].id;
		}
	return 0;
}

/* A runtime that made an ask time out is not asked again for this long:
 * the cgroups met meanwhile are named without it at once, instead of
 * waiting CONTAINER_ASK_S each, one after the other. */
#define RUNTIME_DOWN_NS (60 * 1000000000ull)

static void *ask(void *unused)
{
	static char path[4096];
	char container[sizeof(names->container)];
	unsigned long long id;
	uint64_t asked, down_until = 0;

	(void)unused;
	pthread_mutex_lock(&lock);
	while (!asker_stop) {
		id = next_question(path, sizeof(path));
		if (!id) {
			pthread_cond_wait(&wake, &lock);
			continue;
		}
		pthread_mutex_unlock(&lock);
		container[0] = '\0';
		asked = monotonic_ns();
		if (asked >= down_until) {
			container_name_of_cgroup(path, container, sizeof(container));
			if (monotonic_ns() - asked >= CONTAINER_ASK_S * 1000000000ull)
				down_until = monotonic_ns() + RUNTIME_DOWN_NS;
		}
		pthread_mutex_lock(&lock);
		for (size_t i = 0; i < nr_names; i++)	/* it may be forgotten since */
			if (names[i].id == id && names[i].asking) {
				memcpy(names[i].container, container, sizeof(container));
				names[i].asking = false;
			}
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* The asking thread, with every signal blocked: the tool's signals reach
 * its main thread, whose poll() they interrupt. */
static bool start_asker(void)
{
	sigset_t all, old;
	bool started;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	started = !pthread_create(&asker, NULL, ask, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return started;
}

int name_cgroup_nowait(unsigned long long id)
{
	struct cgroup_name *name;
	int known;

	pthread_mutex_lock(&lock);
	name = find(id);
	if (!name && (name = new_entry(id, NULL))) {
		name->asking = container_id_in_cgroup(name->path);
		nr_names++;
		if (name->asking && !asker_running)
			asker_running = start_asker();
		if (name->asking && !asker_running)
			name->asking = false;	/* no thread: no name */
		pthread_cond_signal(&wake);
	}
	known = !name ? -1 : !name->asking;
	pthread_mutex_unlock(&lock);
	return known;
}

const struct cgroup_name *cgroup_name_known(unsigned long long id)
{
	const struct cgroup_name *name;

	pthread_mutex_lock(&lock);
	name = find(id);
	if (name && name->asking)
		name = NULL;
	pthread_mutex_unlock(&lock);
	return name;
}

void forget_gone_cgroups(void)
{
	__u64 *live;
	long n = cgroup_live_ids(&live);
	size_t kept = 0;

	if (n < 0)
		return;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nr_names; i++) {
		if (cgroup_id_in(live, n, names[i].id))
			names[kept++] = names[i];
		else
			free(names[i].path);
	}
	nr_names = kept;
	pthread_mutex_unlock(&lock);
	free(live);
}

void cgroup_names_close(void)
{
	pthread_mutex_lock(&lock);
	asker_stop = true;
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&lock);
	if (asker_running)
		pthread_join(asker, NULL);
	asker_running = false;
	for (size_t i = 0; i < nr_names; i++)
		free(names[i].path);
	free(names);
	names = NULL;
	nr_names = names_cap = 0;
}
