/* replay: re-issues the page reads of a pagetrace trace, in the original
 * or the on-disk order, with O_DIRECT (measured) or into the page cache
 * (--prefetch). Never opens a trace file for writing (only --latencies's
 * own output). See replay.1. */
#include "replay.h"
#include "emulated_disk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* The whole job failed when there were records and none could be used. */
static int job_failed(const struct replay *r)
{
	if (r->fatal)
		return 1;
	if (r->n_records == 0)
		return 0;
	if (r->opt.plan)
		return r->n_requests == 0;
	return r->stats.requests == 0 && r->stats.already_resident == 0;
}

/* Returns 0, -1 when the replay failed, -2 on a usage error that needed
 * the trace to be seen. */
static int replay_trace(struct replay *r)
{
	if (load_trace(r) < 0)
		return -1;
	if (r->opt.grouped && r->opt.max_request < r->page_size) {
		errmsg("--max-request", "%llu is smaller than the trace's "
		       "page size %llu", (unsigned long long)r->opt.max_request,
		       (unsigned long long)r->page_size);
		return -2;
	}
	if (r->opt.drive_profile && r->n_files &&
	    emulated_disk_begin(r->opt.drive_profile, r->files[0].path) < 0)
		return -1;
	open_files(r);
	if (r->fatal)
		return -1;
	if (build_plan(r) < 0) {
		errmsg(NULL, "out of memory");
		return -1;
	}
	if (r->fatal)
		return -1;
	if (r->opt.plan) {
		print_plan(r);
		return 0;
	}
	if ((r->opt.throttle.riops && throttle_files(r) < 0) ||
	    (r->opt.cgroup && throttle_join(r->opt.cgroup) < 0)) {
		r->fatal = 1;   /* said why, in one line */
		return -1;
	}
	if (r->opt.evict)
		evict_files(r);
	/* Last before the timer: a pause longer than a slice would start a
	 * new one, with a new budget. */
	if (r->n_throttle_disks)
		throttle_spend_budget(r);
	if (r->fatal || run_requests(r) < 0)
		return -1;
	throttle_read_counts(&r->throttled);
	r->throttled.reads -= r->budget_counts.reads;
	r->throttled.read_bytes -= r->budget_counts.read_bytes;
	throttle_end();
	count_seeks(r);
	if (!r->opt.quiet)
		print_summary(r);
	if (r->fatal)
		return -1;
	if (r->opt.json)
		print_json(r);
	if (r->opt.latencies && write_latencies(r) < 0)
		return -1;
	return 0;
}

/* Every file of the trace stays open from planning to the end, and a
 * startup trace can name more files than the usual soft limit of 1024. */
static void raise_open_file_limit(void)
{
	struct rlimit limit;

	if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
	    limit.rlim_cur < limit.rlim_max) {
		limit.rlim_cur = limit.rlim_max;
		setrlimit(RLIMIT_NOFILE, &limit);
	}
}

int main(int argc, char **argv)
{
	struct replay r;
	int status, failed;

	memset(&r, 0, sizeof(r));
	errmsg_init(program_invocation_short_name);
	parse_options(argc, argv, &r.opt);
	raise_open_file_limit();
	status = replay_trace(&r);
	failed = status < 0 || job_failed(&r);
	if (failed && status != -2 && !r.fatal && r.n_records > 0)
		errmsg(NULL, "nothing could be replayed");
	close_files(&r);
	emulated_disk_end();    /* after the files that held its mount */
	free(r.pages);
	free(r.used);
	free(r.requests);
	return status == -2 ? 2 : failed ? 1 : 0;
}
