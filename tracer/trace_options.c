// SPDX-License-Identifier: GPL-2.0
/*
 * trace's options: USAGE and EXAMPLES, parsing (argp's table is made of
 * trace_options.tsv and target_options.tsv), and the checks that need every
 * option. Owns `opts`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <argp.h>
#include "option.h"
#include "errmsg.h"
#include "paths.h"
#include "trace_run.h"

struct options opts = {
	.ringbuf_bytes = 16UL << 20,
};

const char *argp_program_version = TOOL " " TRACE_VERSION;
/* Bad options exit 2, as documented, not argp's default 64. */
error_t argp_err_exit_status = 2;
const char *argp_program_bug_address = "<https://github.com/pagetrace/pagetrace/issues>";
static const char doc[] =
"Record every file page that a command, and every process it starts, caused\n"
"to be read from storage. One line per page: timestamp_us path offset\n"
"(docs/trace-format.md). Needs root, or CAP_BPF and CAP_PERFMON.\n"
"\n"
"USAGE: trace [OPTIONS] -c 'CMD ARGS' | -- CMD ARGS | -p PID | --cgroup PATH |\n"
"             --container NAME [--wait] | -a\n"
"\n"
"EXAMPLES:\n"
"  sudo trace -c 'firefox-esr --headless --screenshot /tmp/x.png' > reads.log\n"
"  sudo trace -o reads.log -- ls -l /usr/lib       # run ls without a shell\n"
"  sudo trace -x -c 'make -j2' > build.log   # + pid tid comm cause dev ino\n"
"  sudo trace -p 1234 -d 10 > reads.log            # a running process, 10 s\n"
"  sudo trace -a -d 5 > system.log                 # every process, 5 s\n"
"  sudo trace --cgroup /sys/fs/cgroup/system.slice/nginx.service -d 30 > svc.log\n"
"  sudo trace --container web --wait --paths container -o web.log  # then start it\n"
"  sudo trace --used -o used.log -- ./app  # + first access of every page\n"
"  sudo trace --drop-caches --used -x -o cold.log -- ./app  # a cold start\n"
"  sudo trace --budget          # each program's verified instructions, stack\n"
"\n"
"When the trace goes to stdout, the command's stdout is sent to stderr so\n"
"that the two never mix; with -o the command's stdout is left alone.\n"
"\n"
"--cgroup and --container trace until -d, Ctrl-C, or the cgroup is removed\n"
"or the container exits.\n"
"\n"
"Exit status: the traced command's status (128+N if killed by signal N);\n"
"3 if it succeeded but events were lost and --allow-lost was not given;\n"
"1 if trace itself failed.\n"
"\n"
"OPTIONS:";

/* argp_options and enum option_key: trace_options.tsv's (docs/option-tables.md). */
#include "trace_options_table.h"

static const struct option_word paths_words[] = {
	{ "host", false }, { "container", true }, {},
};
static const struct option_word attach_words[] = {
	{ "auto", ATTACH_AUTO }, { "tp_btf", ATTACH_TP_BTF }, { "raw_tp", ATTACH_RAW_TP }, {},
};

static error_t parse_opt(int key, char *arg, struct argp_state *state)
{
	uint64_t size;
	char *end;

	switch (key) {
	case ARGP_KEY_INIT: state->child_inputs[0] = &opts.target; break;
	case 'c': opts.command = arg; break;
	case 'a': opts.all = true; break;
	case OPT_WAIT: opts.wait = true; break;
	case OPT_PATHS: opts.paths_container = word_option("--paths", arg, paths_words); break;
	case 'x': opts.extra = true; break;
	case 'o': opts.output = arg; break;
	case OPT_USER: opts.user = arg; break;
	case 'q': opts.quiet = true; break;
	case 'v': opts.verbose = true; break;
	case OPT_NO_CHILDREN: opts.no_children = true; break;
	case OPT_ALLOW_LOST: opts.allow_lost = true; break;
	case OPT_BTF: opts.btf_path = arg; break;
	case OPT_NO_BPF_LOOP: opts.no_bpf_loop = true; break;
	case OPT_USED: opts.used = true; break;
	case OPT_DROP_CACHES: opts.drop_caches = true; break;
	case OPT_BUDGET: opts.budget = true; break;
	case OPT_NO_COST: opts.no_cost = true; break;
	case OPT_NAMES_KEPT:
		if (parse_size(arg, &size) || size < 1 || size > (1UL << 30))
			argp_error(state, "--names-kept must be from 1 to 1G: %s", arg);
		files_kept = size;
		break;
	case OPT_PAGE_STATES:
		if (parse_size(arg, &size) || (opts.page_states = size) != size || opts.page_states == 0 ||
		    opts.page_states > (1UL << 26))
			argp_error(state, "--page-states must be from 1 to 64M: %s", arg);
		break;
	case 'd':
		opts.duration = strtod(arg, &end);
		if (*end || opts.duration <= 0)
			argp_error(state, "invalid duration: %s", arg);
		break;
	case OPT_RINGBUF_SIZE:
		if (parse_size(arg, &size) || (opts.ringbuf_bytes = size) != size ||
		    opts.ringbuf_bytes < 4096 || opts.ringbuf_bytes > (1UL << 30) ||
		    (opts.ringbuf_bytes & (opts.ringbuf_bytes - 1)))
			argp_error(state, "--ringbuf-size must be a power of two from 4K to 1G: %s", arg);
		break;
	case OPT_ATTACH: opts.attach = word_option("--attach", arg, attach_words); break;
	case ARGP_KEY_ARGS:
		opts.argv = state->argv + state->next;
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* Conflicts are checked once every option is known. */
static int check_options(void)
{
	int targets = (opts.command != NULL) + (opts.argv != NULL) + target_count(&opts.target);

	if (opts.budget && (targets || opts.all))
		return errmsg(NULL, "--budget traces nothing: give it no command, -p or -a"), -1;
	if (opts.budget)
		return 0;

	if (opts.command && opts.argv)
		return errmsg(NULL, "give the command with -c or after --, not both"), -1;
	if (targets > 1)
		return errmsg(NULL, "-c/--, -p, --cgroup and --container are exclusive"), -1;
	if (targets == 0 && !opts.all)
		return errmsg(NULL, "nothing to trace: give -c CMD, -- CMD, -p PID, --cgroup PATH, "
			      "--container NAME or -a (see --help)"), -1;
	if (opts.all && (opts.target.pid || opts.target.cgroup_path || opts.target.container))
		return errmsg(NULL, "-a and -p, --cgroup or --container are exclusive"), -1;
	if ((opts.target.cgroup_path || opts.target.container) && opts.no_children)
		return errmsg(NULL, "--no-children makes no sense with --cgroup or --container"), -1;
	if (opts.wait && !opts.target.container)
		return errmsg(NULL, "--wait only applies to --container"), -1;
	if (opts.paths_container && !opts.target.container)
		return errmsg(NULL, "--paths container needs --container"), -1;
	if (target_resolve_cgroup(&opts.target))
		return -1;
	if (opts.all && opts.no_children)
		return errmsg(NULL, "--no-children makes no sense with -a"), -1;
	if (opts.all && !targets && opts.duration == 0)
		errmsg(NULL, "tracing every process until Ctrl-C (or give -d SECONDS)");
	if (opts.drop_caches && !(opts.command || opts.argv))
		return errmsg(NULL, "--drop-caches needs a command to start (-c or --): "
			      "what already runs has its pages"), -1;
	if (opts.user && !(opts.command || opts.argv))
		return errmsg(NULL, "--user only applies to a command run by trace"), -1;
	return 0;
}


int parse_options(int argc, char **argv)
{
	static const struct argp_child children[] = { { &target_argp, 0, NULL, 0 }, {} };
	static const struct argp argp = { argp_options, parse_opt, "[-- CMD [ARGS...]]", doc,
					  children, NULL, NULL };

	if (argp_parse(&argp, argc, argv, 0, NULL, NULL))
		return -1;
	return check_options();
}
