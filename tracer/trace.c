// SPDX-License-Identifier: GPL-2.0
/*
 * trace: record every file page a command (and its children) caused to be
 * read from storage, one line per page: "timestamp_us path offset".
 * The output format is specified in docs/trace-format.md.
 *
 * Flow: parse options -> check kernel features -> open skeleton -> set
 * rodata -> load (tp_btf, else raw_tp) -> attach -> start/adopt the target
 * -> poll the ring buffer until the target exits or a signal -> trailer.
 *
 * This file owns the target (the command started, the process adopted),
 * signals, the progress line and the poll loop. Options: trace_options.c;
 * output: trace_output.c; loading: trace_load.c; names: paths.c; starting
 * the command: command.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include "command.h"
#include "errmsg.h"
#include "attach_choice.h"
#include "bpf_cost.h"
#include "paths.h"
#include "stop_signals.h"
#include "trace_events.h"
#include "trace_run.h"
#include "trace.skel.h"

/* ------------------------------------------------------------------ */
/* Targets                                                            */

static pid_t start_command(struct trace_bpf *skel)
{
	struct command_spec spec = {
		.shell_command = opts.command,
		.argv = opts.argv,
		.user = opts.user,
		/* The trace owns stdout: the command's own output goes to stderr. */
		.stdout_to_stderr = !opts.output,
		.drop_caches = opts.drop_caches,
	};

	note_program(opts.command ? "/bin/sh" : opts.argv[0]);

	return start_gated_command(&spec, mark_thread_traced, skel->maps.traced_tids);
}

/*
 * Has the target finished? Sets *status for a child we started. A pidfd
 * turns readable when an adopted process exits, even while it is a zombie
 * nobody has reaped yet, which kill(pid, 0) cannot see.
 */
static bool target_done(pid_t child, int pidfd, pid_t adopted, int *status)
{
	struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

	if (child > 0)
		return waitpid(child, status, WNOHANG) == child;
	if (pidfd >= 0)
		return poll(&pfd, 1, 0) == 1;
	if (adopted > 0)
		return kill(adopted, 0) && errno == ESRCH;
	if (opts.target.cgroup_path)	/* --container: set once found */
		return !cgroup_target_exists(&opts.target.cgroup);
	return false;
}

/* ------------------------------------------------------------------ */
/* Main loop and reporting                                            */

/*
 * A once-a-second progress line for long runs, only when nobody else writes
 * to the terminal: with -c the command's own output goes to stderr.
 */
static bool want_progress(void)
{
	return !opts.quiet && !opts.command && !opts.argv && isatty(STDERR_FILENO);
}

static void show_progress(unsigned long long *next_ns)
{
	unsigned long long now = clock_ns(CLOCK_MONOTONIC);

	if (now < *next_ns)
		return;
	*next_ns = now + 1000000000ULL;
	fprintf(stderr, "\r%s: %llu pages, %.1f MiB, %zu files, %.0f s ", TOOL, run.pages,
		run.pages * (double)run.page_size / (1 << 20), files.files_read,
		(now - run.start_mono_ns) / 1e9);
}

/* paths.c's hooks for forgetting names: the kernel sends a forgotten name again. */
struct name_cache {
	struct trace_bpf *skel;
	struct ring_buffer *rb;
};

static void forget_name(const struct file_id *id, void *ctx)
{
	struct name_cache *cache = ctx;

	/* Void every CPU's memory of the name it sent last (file_path.bpf.h) first. */
	cache->skel->bss->names_epoch++;
	bpf_map__delete_elem(cache->skel->maps.named_files, id, sizeof(*id), 0);
}

static void drain_events(void *ctx)
{
	struct name_cache *cache = ctx;

	ring_buffer__consume(cache->rb);
}

/*
 * Wait up to 100 ms for the kernel's wakeup or the target's end (@pidfd
 * readable; -1: none to wait for), then read what the ring buffer holds:
 * the kernel wakes us only once a quarter of the buffer is used, and a
 * target's end is seen at once, not up to a timeout later. Returns
 * ring_buffer__consume()'s.
 */
static int wait_and_consume(struct ring_buffer *rb, int pidfd)
{
	struct pollfd fds[2] = { { .fd = ring_buffer__epoll_fd(rb), .events = POLLIN },
				 { .fd = pidfd, .events = POLLIN } };

	if (poll(fds, pidfd >= 0 ? 2 : 1, 100) < 0 && errno != EINTR)
		return -errno;
	return ring_buffer__consume(rb);
}

/* Returns 0, or -1 when the ring buffer failed (said on stderr). */
static int poll_until_done(struct trace_bpf *skel, struct ring_buffer *rb, pid_t child,
			   pid_t adopted, int *status)
{
	struct name_cache cache = { skel, rb };
	pid_t target = child > 0 ? child : adopted;
	int pidfd = target > 0 ? (int)syscall(SYS_pidfd_open, target, 0) : -1;
	unsigned long long deadline = opts.duration > 0 ?
		clock_ns(CLOCK_MONOTONIC) + (unsigned long long)(opts.duration * 1e9) : 0;
	unsigned long long next_progress_ns = 0;
	bool progress = want_progress();
	int err, result = 0;

	while (!stop_requested && !run.write_failed) {
		err = wait_and_consume(rb, pidfd);
		if (err < 0 && err != -EINTR && !run.write_failed) {
			errmsg("reading the ring buffer", "%s", errmsg_strerror(-err));
			result = -1;
			break;
		}
		if (progress)
			show_progress(&next_progress_ns);
		/* Long runs (-a): memory bounded by the files in use, not by time. */
		forget_stale_files(forget_name, drain_events, &cache);
		if (target_done(child, pidfd, adopted, status))
			break;
		if (deadline && clock_ns(CLOCK_MONOTONIC) >= deadline)
			break;
	}
	/* Everything queued before the target ended is already in the buffer. */
	ring_buffer__consume(rb);
	if (progress)
		fputc('\n', stderr);
	if (pidfd >= 0)
		close(pidfd);
	return result;
}

/* Stop a command we started when trace itself is interrupted or fails. */
static void reap_command(pid_t child, int *status)
{
	if (child <= 0 || waitpid(child, status, WNOHANG) == child)
		return;
	kill(child, SIGTERM);
	waitpid(child, status, 0);
}

/* The mount table, the statistics, the programs attached, the ring buffer; NULL once said. */
static struct ring_buffer *attach_programs(struct trace_bpf *skel)
{
	struct ring_buffer *rb;
	int err;

	if (load_mounts())
		return NULL;
	cost_phase("mounts");
	/* Before attaching: every run of the programs counted. */
	cost_stats_start(opts.no_cost);
	cost_phase("statistics on");
	err = attach_loaded(skel);
	if (err) {
		attach_failure_say(err, "--used");
		return NULL;
	}
	cost_phase("attach");
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), handle_event, NULL, NULL);
	if (!rb)
		errmsg("ring buffer", "%s", errmsg_strerror(errno));
	return rb;
}

/* The target is done: the trailer and the summary. Returns trace's exit status. */
static int finish(struct trace_bpf *skel, bool started, int status)
{
	struct lost_counts lost = read_lost(skel);
	unsigned long long duration_us;
	struct bpf_cost cost;
	int exit_code;

	loaded_cost(skel, &cost);
	duration_us = (clock_ns(CLOCK_MONOTONIC) - run.start_mono_ns) / 1000;
	write_trailer(&lost, duration_us, &cost);
	if (run.write_failed || ferror(run.out)) {
		errmsg("writing the trace", "%s", errmsg_strerror(errno ? errno : EIO));
		return 1;
	}
	report(&lost, duration_us, &cost);
	exit_code = started ? exit_code_of(status) : 0;
	if (exit_code == 0 && lost.total && !opts.allow_lost)
		exit_code = EXIT_LOST;
	return exit_code;
}

int main(int argc, char **argv)
{
	struct trace_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	pid_t child = -1, adopted = -1;
	int status = 0, exit_code = 1;

	cost_phase_start();
	errmsg_init(TOOL);
	if (parse_options(argc, argv))
		return 2;
	run.page_size = sysconf(_SC_PAGESIZE);
	trace_print_to_libbpf();
	if (opts.budget)
		return trace_budget();
	if (open_output())
		return 1;

	if (opts.target.container && container_target_check())
		goto cleanup;
	skel = load_programs();
	if (!skel || !(rb = attach_programs(skel)))
		goto cleanup;
	stop_on_signals();
	measure_clock_offset();
	write_header(run.out);

	if (opts.target.pid && adopt_threads(opts.target.pid, mark_thread_traced, skel->maps.traced_tids))
		goto cleanup;
	adopted = opts.target.pid ? opts.target.pid : -1;
	/* -p, -a, --cgroup, --container: a script starts its workload after this line. */
	if (!opts.command && !opts.argv)
		say_ready(TOOL);
	if (opts.target.container && container_target_wait(skel, &stop_requested) < 0)
		goto cleanup;
	if ((opts.command || opts.argv) && (child = start_command(skel)) < 0)
		goto cleanup;
	cost_phase("start");
	if (opts.verbose)
		cost_phases_print(stderr, TOOL);

	if (poll_until_done(skel, rb, child, adopted, &status))
		goto cleanup;	/* reap_command() below stops the command */
	reap_command(child, &status);
	exit_code = finish(skel, child > 0, status);
	child = -1;	/* reaped */

cleanup:
	if (exit_code == 1 && child > 0)
		reap_command(child, &status);
	ring_buffer__free(rb);
	unload_programs(skel);
	cost_stats_stop();
	if (run.out && run.out != stdout)
		fclose(run.out);
	else if (run.out)
		fflush(run.out);
	free_mounts();
	container_target_free();
	return exit_code;
}
