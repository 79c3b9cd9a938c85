/* SPDX-License-Identifier: GPL-2.0 */
/* command.c: starting the observed command, gated, and its exit code. */
#ifndef PAGETRACE_COMMAND_H
#define PAGETRACE_COMMAND_H

#include <stdbool.h>
#include <sys/types.h>

struct command_spec {
	const char *shell_command;	/* run with /bin/sh -c, or: */
	char **argv;			/* run directly (execvp) */
	const char *user;		/* run as (NULL: the sudo caller, else us) */
	bool stdout_to_stderr;		/* the tool's output owns stdout */
	bool drop_caches;		/* --drop-caches: start from a cold page cache */
};

/*
 * Fork, call @mark(@ctx, child) while the child waits, then let it exec:
 * with @spec->drop_caches, after sync and an emptied page cache, so that
 * everything the command reads comes from storage.
 */
pid_t start_gated_command(const struct command_spec *spec,
			  int (*mark)(void *ctx, pid_t child), void *ctx);
/* -p: call @mark(@ctx, tid) for every thread of @pid; -1 (said) if there is none. */
int adopt_threads(pid_t pid, int (*mark)(void *ctx, pid_t tid), void *ctx);
/*
 * A mark callback for both: put thread @tid in @traced_tids (a struct
 * bpf_map *, the kernel side's traced_tids).
 */
int mark_thread_traced(void *traced_tids, pid_t tid);
/* The exit status a tool passes on: N, or 128+N when killed by signal N. */
int exit_code_of(int status);

#endif /* PAGETRACE_COMMAND_H */
