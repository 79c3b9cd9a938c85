// SPDX-License-Identifier: GPL-2.0
/*
 * command: the processes a tool observes. Start the command (trace -c/--,
 * cachetop -c), stopped until the tool has marked it traced, as the right
 * user; adopt a running process's threads (-p); mark a thread traced for
 * the kernel side; turn a wait status into an exit code. Used by trace and
 * cachetop.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <bpf/libbpf.h>
#include "command.h"
#include "errmsg.h"
#include "userdb.h"

/* Who the command runs as: -u USER, else the sudo caller, else ourselves
 * (name empty). */
static int target_credentials(const char *user, struct userdb_user *out)
{
	const char *sudo_uid = getenv("SUDO_UID");

	out->name[0] = '\0';
	if (user && userdb_by_name(user, out))
		return errmsg("-u", "%s: %s", user, errno == ENOENT ? "no such user" :
			      errmsg_strerror(errno)), -1;
	if (!user && getuid() == 0 && sudo_uid && userdb_by_uid((uid_t)atol(sudo_uid), out))
		return errmsg("SUDO_UID", "%s: %s", sudo_uid, errno == ENOENT ? "no such user" :
			      errmsg_strerror(errno)), -1;
	return 0;
}

static void drop_privileges(const struct userdb_user *user)
{
	if (!user->name[0] || user->uid == geteuid())
		return;
	if (userdb_become(user)) {
		errmsg("running as", "%s: %s", user->name, errmsg_strerror(errno));
		_exit(126);
	}
	setenv("HOME", user->home, 1);
	setenv("USER", user->name, 1);
	setenv("LOGNAME", user->name, 1);
}

/*
 * Fork the command stopped on a pipe, let @mark trace it, then let it exec:
 * the programs are attached before its first instruction, so the loader's
 * reads are seen.
 */
/* sync, then drop clean page cache, dentries and inodes: as pack does. */
static int drop_page_cache(void)
{
	static const char path[] = "/proc/sys/vm/drop_caches";
	int fd, ok;

	sync();
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errmsg(path, "--drop-caches: %s", errmsg_strerror(errno)), -1;
	ok = write(fd, "3\n", 2) == 2;
	if (!ok)
		errmsg(path, "--drop-caches: %s", errmsg_strerror(errno));
	close(fd);
	return ok ? 0 : -1;
}

pid_t start_gated_command(const struct command_spec *spec,
			  int (*mark)(void *ctx, pid_t child), void *ctx)
{
	struct userdb_user user;
	int gate[2];
	char go;
	pid_t child;

	if (target_credentials(spec->user, &user) ||
	    (spec->drop_caches && drop_page_cache()) || pipe2(gate, O_CLOEXEC))
		return -1;
	child = fork();
	if (child < 0)
		return errmsg("fork", "%s", errmsg_strerror(errno)), -1;
	if (child == 0) {
		close(gate[1]);
		if (read(gate[0], &go, 1) != 1)
			_exit(127);	/* the tool failed before starting us */
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		if (spec->stdout_to_stderr && dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
			_exit(127);
		drop_privileges(&user);
		if (spec->shell_command)
			execl("/bin/sh", "sh", "-c", spec->shell_command, (char *)NULL);
		else
			execvp(spec->argv[0], spec->argv);
		errmsg(spec->shell_command ? "/bin/sh" : spec->argv[0], "%s", errmsg_strerror(errno));
		_exit(127);
	}
	close(gate[0]);
	if (mark(ctx, child)) {
		close(gate[1]);
		waitpid(child, NULL, 0);
		return -1;
	}
	if (write(gate[1], "g", 1) != 1) {
		close(gate[1]);
		return errmsg("starting command", "%s", errmsg_strerror(errno)), -1;
	}
	close(gate[1]);
	return child;
}

int exit_code_of(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

/*
 * -p: let @mark trace every thread of @pid. Called after attaching, so
 * threads created meanwhile are caught by the fork tracepoint.
 */
int adopt_threads(pid_t pid, int (*mark)(void *ctx, pid_t tid), void *ctx)
{
	char dir_name[64];
	struct dirent *entry;
	DIR *dir;
	int n = 0;

	snprintf(dir_name, sizeof(dir_name), "/proc/%d/task", (int)pid);
	dir = opendir(dir_name);
	if (!dir)
		return errmsg("-p", "%d: %s", (int)pid, errno == ENOENT ? "no such process" :
			      errmsg_strerror(errno)), -1;
	while ((entry = readdir(dir)))
		if (entry->d_name[0] != '.' && !mark(ctx, atoi(entry->d_name)))
			n++;
	closedir(dir);
	return n ? 0 : (errmsg("-p", "%d: no such process", (int)pid), -1);
}

int mark_thread_traced(void *traced_tids, pid_t tid)
{
	__u32 key = (__u32)tid;
	__u8 one = 1;

	if (bpf_map__update_elem(traced_tids, &key, sizeof(key), &one, sizeof(one), BPF_ANY))
		return errmsg("tracing a task", "%d: %s", tid, errmsg_strerror(errno)), -1;
	return 0;
}
