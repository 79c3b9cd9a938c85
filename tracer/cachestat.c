// SPDX-License-Identifier: GPL-2.0
/*
 * cachestat: system-wide page-cache hits, misses and dirties per interval,
 * the columns of bcc's cachestat, counted exactly on tracepoints (see
 * cache.bpf.c and page_access.bpf.h for the words). Owns the options, the
 * interval loop and the output; loading is cache_load.c's, serving
 * --openmetrics openmetrics.c's.
 */
#define _GNU_SOURCE
#include <argp.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "errmsg.h"
#include "stop_signals.h"
#include "attach_choice.h"
#include "cache_load.h"
#include "openmetrics.h"
#include "target_options.h"
#include "clock.h"

#define TOOL "cachestat"

static struct options {
	struct cache_args common;	/* [INTERVAL [COUNT]], -j, -v, --cgroup, --container */
	bool budget;
	const char *openmetrics;	/* --openmetrics ADDR:PORT */
} opts;

static const char doc[] =
"Page-cache hits, misses and dirties of the whole system (or of one cgroup\n"
"and those below it, with --cgroup or --container), every INTERVAL\n"
"seconds (default 1), COUNT times (default: until Ctrl-C). A hit is an access\n"
"to a page that was in the cache; a miss is the first access to a page read\n"
"from storage while cachestat runs; an access is a page a read, pread,\n"
"readv, sendfile or splice asked for, or the faulting page of an mmap fault.\n"
"Writes count as dirties, never as misses. HIT% = hits / (hits + misses).\n"
"BUFFERS_MB and CACHED_MB come from /proc/meminfo. Needs root.\n"
"\n"
"USAGE: cachestat [OPTIONS] [INTERVAL [COUNT]]\n"
"\n"
"EXAMPLES:\n"
"  sudo pagetrace-cachestat              # every second, until Ctrl-C\n"
"  sudo pagetrace-cachestat 5 12         # every 5 s, for a minute\n"
"  sudo pagetrace-cachestat -j 1 10 > cache.jsonl   # one JSON object a line\n"
"  sudo pagetrace-cachestat --cgroup /sys/fs/cgroup/system.slice/nginx.service 5\n"
"  sudo pagetrace-cachestat --container web 5   # a running docker or podman container\n"
"  sudo pagetrace-cachestat --openmetrics :9411 60   # Prometheus scrapes 127.0.0.1:9411\n"
"  sudo pagetrace-cachestat --budget    # verified instructions and stack\n"
"\n"
"OPTIONS:";

/* argp_options and enum option_key: cachestat_options.tsv's (docs/option-tables.md). */
#include "cachestat_options_table.h"

static error_t parse_opt(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case ARGP_KEY_INIT: state->child_inputs[0] = &opts.common; break;
	case OPT_BUDGET: opts.budget = true; break;
	case OPT_OPENMETRICS: opts.openmetrics = arg; break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* Buffers and Cached of /proc/meminfo, in MiB. */
static void read_meminfo(double *buffers_mb, double *cached_mb)
{
	FILE *file = fopen("/proc/meminfo", "re");
	char line[256];
	unsigned long long kb;

	*buffers_mb = *cached_mb = 0;
	if (!file)
		return;
	while (fgets(line, sizeof(line), file)) {
		if (sscanf(line, "Buffers: %llu kB", &kb) == 1)
			*buffers_mb = kb / 1024.0;
		else if (sscanf(line, "Cached: %llu kB", &kb) == 1)
			*cached_mb = kb / 1024.0;
	}
	fclose(file);
}

/* One interval's line: 0, or -1 said when stdout cannot take it. */
static int print_interval(const __u64 *now, const __u64 *before)
{
	__u64 hits = now[CACHE_HITS] - before[CACHE_HITS];
	__u64 misses = now[CACHE_MISSES] - before[CACHE_MISSES];
	__u64 dirties = now[CACHE_DIRTIES] - before[CACHE_DIRTIES];
	__u64 mapped = now[CACHE_MAPPED] - before[CACHE_MAPPED];
	double ratio = read_hit_ratio(hits, misses), buffers, cached;
	char stamp[32];
	time_t t = time(NULL);
	struct tm tm;

	read_meminfo(&buffers, &cached);
	if (opts.common.json) {
		gmtime_r(&t, &tm);
		strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
		printf("{\"time\": \"%s\", \"hits\": %llu, \"misses\": %llu, \"dirties\": %llu, "
		       "\"mapped\": %llu, \"read_hit_ratio\": %.6f, \"buffers_mb\": %.1f, "
		       "\"cached_mb\": %.1f, \"lost\": %llu}\n", stamp, (unsigned long long)hits,
		       (unsigned long long)misses, (unsigned long long)dirties,
		       (unsigned long long)mapped, ratio, buffers, cached,
		       (unsigned long long)(cache_lost(now) - cache_lost(before)));
	} else {
		printf("%10llu %10llu %10llu %7.2f%% %11.1f %11.1f\n", (unsigned long long)hits,
		       (unsigned long long)misses, (unsigned long long)dirties, ratio * 100,
		       buffers, cached);
	}
	return errmsg_stdout_flushed();
}

/* Until CLOCK_MONOTONIC reaches @until_ns, or a signal asks to stop;
 * answering scrapes meanwhile when there is a @server. The samples keep to
 * their times whatever the scrapers do (openmetrics.c never blocks). */
static void wait_until(uint64_t until_ns, struct openmetrics *server, struct cache_bpf *skel)
{
	struct timespec t = { (time_t)(until_ns / 1000000000u), (long)(until_ns % 1000000000u) };

	if (server)
		return openmetrics_serve(server, until_ns, skel,
					 opts.common.target.cgroup_path ? opts.common.target.cgroup.path : NULL, &stop_requested);
	while (!stop_requested && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
		;
}

/* The next sample's time: one interval after @last, or after now when the
 * loop fell behind by more than one (a stopped process), so that it does
 * not catch up in a burst. */
static uint64_t next_sample(uint64_t last, uint64_t interval_ns)
{
	uint64_t now = monotonic_ns();

	return last + interval_ns < now ? now + interval_ns : last + interval_ns;
}

int main(int argc, char **argv)
{
	static const struct argp_child children[] = { { &cache_args_argp_no_pid, 0, NULL, 0 }, {} };
	static const struct argp argp = { argp_options, parse_opt, "[INTERVAL [COUNT]]", doc,
					  children, NULL, NULL };
	struct cache_load_options load = { .all = true };
	__u64 before[NR_CACHE_COUNTERS] = {}, now[NR_CACHE_COUNTERS];
	struct cache_bpf *skel;
	struct openmetrics *server = NULL;
	uint64_t interval_ns, when;
	int exit_code = 1, listened;

	errmsg_init(TOOL);
	if (argp_parse(&argp, argc, argv, 0, NULL, NULL))
		return 2;
	if (target_count(&opts.common.target) > 1)
		return errmsg(NULL, "--cgroup and --container are exclusive"), 2;
	if (target_resolve_cgroup(&opts.common.target))
		return 2;
	if (geteuid() != 0)
		return errmsg(NULL, "needs root (it loads BPF programs): run it with sudo"), 1;
	if (target_resolve_container(&opts.common.target))
		return 1;
	if (opts.budget && opts.common.every.given)
		return errmsg("--budget", "counts nothing: give it no INTERVAL or COUNT"), 2;
	if (opts.budget)
		return cache_budget(opts.common.verbose);
	/* Before loading: a port taken leaves nothing attached. */
	if (opts.openmetrics && (listened = openmetrics_listen(opts.openmetrics, &server)) < 0)
		return listened == -2 ? 2 : 1;
	load.verbose = opts.common.verbose;
	load.per_cgroup = opts.openmetrics != NULL;	/* its families by cgroup */
	if (opts.common.target.cgroup_path) {
		load.all = false;
		load.cgroup = &opts.common.target.cgroup;
	}
	skel = cache_load(&load);
	if (!skel) {
		openmetrics_close(server);
		return 1;
	}
	stop_on_signals();
	say_ready(TOOL);
	if (!opts.common.json)
		printf("%10s %10s %10s %8s %11s %11s\n", "HITS", "MISSES", "DIRTIES", "HIT%",
		       "BUFFERS_MB", "CACHED_MB");
	interval_ns = (uint64_t)(opts.common.every.seconds * 1e9);
	when = monotonic_ns();
	for (unsigned long i = 0; !stop_requested && (!opts.common.every.count || i < opts.common.every.count); i++) {
		when = next_sample(when, interval_ns);
		wait_until(when, server, skel);
		if (cache_read_totals(skel, now))
			goto cleanup;
		if (print_interval(now, before))
			goto cleanup;
		memcpy(before, now, sizeof(now));
	}
	cache_report_lost(before);
	exit_code = 0;
cleanup:
	openmetrics_close(server);
	cache_unload(skel);
	return exit_code;
}
