/* Command line of diskemu (argp); its options are options.tsv's. */
#include "diskemu.h"
#include "option.h"

#include <argp.h>
#include <stdlib.h>
#include <string.h>

#include "option_table.h"

PAGETRACE_ARGP_PROGRAM("diskemu", PAGETRACE_VERSION);

static const char doc[] =
"Emulates a spinning disk holding IMAGE: prints the path of a loop device\n"
"(one line on stdout) whose every read is delayed as the drive PROFILE\n"
"would take (one head, arrival order, seek curve, rotation, zoned transfer\n"
"rate), and serves it until SIGINT, SIGTERM or SIGHUP; then unmounts and\n"
"detaches everything it set up. The device is read-only. Root.\n"
"Installed as pagetrace-diskemu.\n"
"\n"
"USAGE: diskemu [OPTIONS] IMAGE\n"
"\n"
"EXAMPLES:\n"
"  sudo diskemu disk.img                   hdd-7200; prints /dev/loopN\n"
"  sudo diskemu --profile hdd-5400 --mount /mnt/slow fs.img\n"
"                                          its file system at /mnt/slow\n"
"  sudo diskemu --read-ahead 2560 --mount /mnt/slow fs.img\n"
"                                          a larger read-ahead\n"
"  sudo diskemu --log requests.csv disk.img\n"
"                                          each request's modelled times\n"
"  diskemu --list-profiles\n"
"  diskemu --predict --profile hdd-7200 disk.img\n"
"                                          the model's IOPS and rates\n"
"  truncate -s 1000204886016 whole.img && sudo diskemu whole.img\n"
"                                          a whole hdd-7200, sparse\n"
"\n"
"Exit status: 0 after a clean shutdown; 1 when the device could not be\n"
"set up or not be torn down; 2 on a usage error.\n"
"\n"
"OPTIONS:";

/* A SATA disk's read_ahead_kb: the kernel's default when a drive reports
 * no optimal I/O size, as spinning disks do. */
#define DEFAULT_READ_AHEAD_KB 128

static error_t parse_opt(int key, char *arg, struct argp_state *state)
{
	struct diskemu_options *o = state->input;

	switch (key) {
	case OPT_PROFILE: o->profile = arg; break;
	case OPT_PROFILES: o->profiles = arg; break;
	case OPT_LIST_PROFILES: o->list = 1; break;
	case OPT_PREDICT: o->predict = 1; break;
	case OPT_MOUNT: o->mount = arg; break;
	case OPT_LOG: o->log = arg; break;
	case OPT_EXIT_WITH_PARENT: o->exit_with_parent = 1; break;
	case OPT_READ_AHEAD:
		o->read_ahead_kb = (unsigned)number_option("--read-ahead", arg,
							   NULL, 0, 1048576);
		break;
	case 'j': o->json = 1; break;
	case 'q': o->quiet = 1; break;
	case ARGP_KEY_ARG:
	case ARGP_KEY_END:
		one_operand(state, key, arg, &o->image, "one IMAGE only",
			    o->list ? NULL : "no IMAGE");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

int diskemu_parse_options(int argc, char **argv, struct diskemu_options *o)
{
	static const struct argp argp = {argp_options, parse_opt, "IMAGE",
					 doc, help_children, NULL, NULL};

	argp_err_exit_status = 2;
	memset(o, 0, sizeof(*o));
	o->profile = "hdd-7200";
	o->read_ahead_kb = DEFAULT_READ_AHEAD_KB;
	return argp_parse(&argp, argc, argv, 0, NULL, o);
}
