/* Command line of diskemu (argp). */
#include "diskemu.h"
#include "option.h"

#include <argp.h>
#include <stdlib.h>
#include <string.h>

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

enum option_key {
	OPT_PROFILE = 0x100, OPT_PROFILES, OPT_LIST, OPT_PREDICT, OPT_MOUNT,
	OPT_LOG, OPT_EXIT_WITH_PARENT, OPT_READ_AHEAD,
};

/* A SATA disk's read_ahead_kb: the kernel's default when a drive reports
 * no optimal I/O size, as spinning disks do. */
#define DEFAULT_READ_AHEAD_KB 128

static const struct argp_option argp_options[] = {
	{"profile", OPT_PROFILE, "NAME", 0, "The drive (default hdd-7200; "
	 "--list-profiles, docs/diskemu.md)", 1},
	{"profiles", OPT_PROFILES, "FILE", 0, "The profile table (default: "
	 "profiles.tsv beside the program)", 1},
	{"list-profiles", OPT_LIST, NULL, 0, "Print the profile names", 1},
	{"predict", OPT_PREDICT, NULL, 0, "Print what the model predicts for "
	 "IMAGE (random 4 KiB IOPS, zone rates) and exit", 1},
	{"mount", OPT_MOUNT, "DIR", 0, "Also mount the image's file system "
	 "read-only on DIR (unmounted at the end)", 2},
	{"read-ahead", OPT_READ_AHEAD, "KB", 0, "The device's read_ahead_kb "
	 "(default 128, a SATA disk's; a loop device keeps an earlier "
	 "one's otherwise)", 2},
	{"log", OPT_LOG, "FILE", 0, "One CSV line per request: its modelled "
	 "arrival, seek, rotation, transfer and completion", 2},
	{"exit-with-parent", OPT_EXIT_WITH_PARENT, NULL, 0, "Shut down when "
	 "the parent process dies (for tools that start diskemu)", 2},
	{"json", 'j', NULL, 0, "The device and, at the end, the counts as JSON "
	 "lines on stdout", 3},
	{"quiet", 'q', NULL, 0, "No summary on stderr", 3},
	{NULL, 0, NULL, 0, NULL, 0},
};

static error_t parse_opt(int key, char *arg, struct argp_state *state)
{
	struct diskemu_options *o = state->input;

	switch (key) {
	case OPT_PROFILE: o->profile = arg; break;
	case OPT_PROFILES: o->profiles = arg; break;
	case OPT_LIST: o->list = 1; break;
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
