/* Command line of replay (argp). Conflicts are checked once everything is
 * parsed, so the order of options never matters. Short options are only
 * those of the pagetrace vocabulary (-h -V -q -j); everything else is
 * long-only. The options themselves are options.tsv's. */
#include "replay.h"

#include <argp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emulated_disk.h"
#include "option.h"
#include "option_table.h"

PAGETRACE_ARGP_PROGRAM("replay", REPLAY_VERSION);

static const char doc[] =
"Re-issues the page reads recorded in TRACE (pagetrace trace format 1 or 2,\n"
"'-' for stdin) with O_DIRECT, measured, in the original or the on-disk\n"
"order; or fills the page cache with them (--prefetch). Only `read`\n"
"records are used, unless --used asks for the pages the program used.\n"
"Never writes to a traced file. Installed as pagetrace-replay.\n"
"\n"
"USAGE: replay [OPTIONS] TRACE\n"
"\n"
"EXAMPLES:\n"
"  replay reads.log                        original order, O_DIRECT, timed\n"
"  replay --sorted reads.log               on-disk order\n"
"  replay --sorted --prefetch reads.log    fill the page cache in disk order\n"
"  replay --sorted --prefetch --used used.log\n"
"                                          only the pages the program used\n"
"                                          (recorded with trace --used)\n"
"  replay --plan --sorted reads.log > plan.csv\n"
"  replay --queue-depth 8 --max-request 256K reads.log\n"
"  replay --first-reads reads.log          each page once, first read\n"
"  replay --no-group --latencies lat.csv reads.log\n"
"                                          each read's latency\n"
"  sudo replay --throttle riops=150 reads.log   as on a 150-IOPS disk\n"
"  sudo replay --device-profile cloud-3000 --sorted reads.log\n"
"  sudo replay --device-profile hdd-7200 --sorted reads.log\n"
"                                          on an emulated 7,200 rpm disk\n"
"                                          (files on a loop-mounted image)\n"
"  sudo replay --cgroup /sys/fs/cgroup/slow reads.log\n"
"                                          timed inside your own cgroup\n"
"  trace -- app | replay --evict --json -\n"
"\n"
"Exit status: 0; 1 when the trace could not be read or nothing could be\n"
"replayed; 2 on a usage error.\n"
"\n"
"OPTIONS:";

/* What parse_options needs besides the options themselves. */
struct parse_state {
	struct options *opt;
	int order_options;   /* how many of --sorted/--sort were given */
	enum replay_order first_order;
	int buffered, prefetch;
	int throttles;       /* how many of --throttle/--device-profile */
};

static int parse_order(const char *text, enum replay_order *order)
{
	if (strcmp(text, "original") == 0)
		*order = ORDER_ORIGINAL;
	else if (strcmp(text, "disk") == 0 || strcmp(text, "physical") == 0)
		*order = ORDER_SORTED;
	else if (strcmp(text, "file") == 0)
		*order = ORDER_FILE;
	else
		return -1;
	return 0;
}

static void check_conflicts(struct argp_state *state)
{
	const struct parse_state *ps = state->input;
	const struct options *opt = ps->opt;

	if (ps->order_options > 1 && opt->order != ps->first_order)
		argp_error(state, "--sorted and --sort=KEY disagree");
	if (ps->buffered && ps->prefetch)
		argp_error(state, "--buffered and --prefetch conflict");
	if (opt->json && opt->plan)
		argp_error(state, "--json and --plan both write stdout");
	if (!opt->grouped && opt->max_request_given)
		argp_error(state, "--no-group and --max-request conflict");
	if (opt->timing && opt->order != ORDER_ORIGINAL)
		argp_error(state, "--timing needs the original order");
	if (opt->plan && opt->evict)
		argp_error(state, "--plan does no I/O: drop --evict");
	if (opt->window && !ps->prefetch)
		argp_error(state, "--window limits --prefetch: add --prefetch");
	if (ps->throttles > 1)
		argp_error(state, "give one of --throttle and --device-profile, "
			   "once");
	if (opt->plan && opt->throttle.riops)
		argp_error(state, "--plan does no I/O: drop --throttle");
	if (opt->plan && opt->cgroup)
		argp_error(state, "--plan does no I/O: drop --cgroup");
	if (opt->plan && opt->drive_profile)
		argp_error(state, "--plan does no I/O: drop --device-profile");
	if (opt->used && opt->first_reads)
		argp_error(state, "--used already takes each page once: drop "
			   "--first-reads");
	if (opt->plan && opt->latencies)
		argp_error(state, "--plan does no I/O: drop --latencies");
	if (opt->latencies && strcmp(opt->latencies, "-") == 0 &&
	    opt->json)
		argp_error(state, "--json and --latencies - both write stdout");
	if (opt->cgroup && opt->throttle.riops)
		argp_error(state, "--cgroup and --throttle both choose the "
			   "cgroup: give one");
}

/* Bad limits are said in one line, `replay: --throttle: TEXT: why`. */
static void parse_throttle(struct argp_state *state, int key, char *arg)
{
	struct parse_state *ps = state->input;
	const char *why = NULL;

	ps->throttles++;
	if (key == OPT_DEVICE_PROFILE &&
	    throttle_profile(arg, &ps->opt->throttle) < 0) {
		if (emulated_disk_has_profile(arg)) {
			ps->opt->drive_profile = arg;
			return;
		}
		errmsg("--device-profile", "'%s': no such profile (there are "
		       "%s, and diskemu's: diskemu --list-profiles)", arg,
		       throttle_profile_names());
		exit(2);
	}
	if (key == OPT_THROTTLE &&
	    throttle_parse(arg, &ps->opt->throttle, &why) < 0) {
		errmsg("--throttle", "'%s': %s", arg, why);
		exit(2);
	}
}

static void set_order(struct parse_state *ps, enum replay_order order)
{
	if (ps->order_options++ == 0)
		ps->first_order = order;
	ps->opt->order = order;
}

/* The options that take no argument and only set a flag. */
static int parse_flag(int key, struct parse_state *ps)
{
	struct options *opt = ps->opt;

	switch (key) {
	case OPT_NO_GROUP: opt->grouped = 0; return 0;
	case OPT_BUFFERED:
		opt->mode = MODE_BUFFERED;
		ps->buffered = 1;
		return 0;
	case OPT_PREFETCH:
		opt->mode = MODE_PREFETCH;
		ps->prefetch = 1;
		return 0;
	case OPT_EVICT: opt->evict = 1; return 0;
	case OPT_TIMING: opt->timing = 1; return 0;
	case OPT_STRICT: opt->strict = 1; return 0;
	case OPT_PLAN: opt->plan = 1; return 0;
	case OPT_USED: opt->used = 1; return 0;
	case OPT_FIRST_READS: opt->first_reads = 1; return 0;
	case 'j': opt->json = 1; return 0;
	case 'q': opt->quiet = 1; return 0;
	}
	return -1;
}

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	struct parse_state *ps = state->input;
	struct options *opt = ps->opt;
	enum replay_order order = ORDER_ORIGINAL;

	switch (key) {
	case OPT_SORTED:
		set_order(ps, ORDER_SORTED);
		return 0;
	case OPT_SORT:
		if (parse_order(arg, &order) < 0)
			argp_error(state, "unknown sort key '%s'", arg);
		set_order(ps, order);
		return 0;
	case OPT_MAX_REQUEST:
		opt->max_request = number_option("--max-request", arg,
						 &size_units, 1, UINT64_MAX);
		opt->max_request_given = 1;
		return 0;
	case OPT_WINDOW:
		opt->window = number_option("--window", arg, &size_units, 1,
					    UINT64_MAX);
		return 0;
	case OPT_QUEUE_DEPTH:
		opt->queue_depth = (int)number_option("--queue-depth", arg, NULL,
						      1, MAX_QUEUE_DEPTH);
		return 0;
	case OPT_THROTTLE:
	case OPT_DEVICE_PROFILE:
		parse_throttle(state, key, arg);
		return 0;
	case OPT_CGROUP:
		if (!arg[0])
			argp_error(state, "--cgroup needs a directory");
		opt->cgroup = arg;
		return 0;
	case OPT_LATENCIES:
		if (!arg[0])
			argp_error(state, "--latencies needs a file");
		opt->latencies = arg;
		return 0;
	case ARGP_KEY_ARG:
	case ARGP_KEY_END:
		one_operand(state, key, arg, &opt->trace, "more than one TRACE",
			    "no TRACE given");
		if (key == ARGP_KEY_END)
			check_conflicts(state);
		return 0;
	}
	return parse_flag(key, ps) == 0 ? 0 : ARGP_ERR_UNKNOWN;
}

/* Parses the command line into OPT; usage errors, --help and --version
 * exit (status 2, 0, 0). */
void parse_options(int argc, char **argv, struct options *opt)
{
	static const struct argp argp = {argp_options, parse_arg, "TRACE", doc,
					 help_children, NULL, NULL};
	struct parse_state ps = {opt, 0, ORDER_ORIGINAL, 0, 0, 0};

	memset(opt, 0, sizeof(*opt));
	opt->grouped = 1;
	opt->max_request = DEFAULT_MAX_REQUEST;
	opt->queue_depth = 1;
	argp_err_exit_status = 2;
	/* argp_error() exits, so a non-zero return is only out of memory. */
	if (argp_parse(&argp, argc, argv, 0, NULL, &ps) != 0) {
		errmsg(NULL, "out of memory");
		exit(1);
	}
	/* Buffered reads only measure anything on a cold cache. */
	if (opt->mode == MODE_BUFFERED)
		opt->evict = 1;
}
