/* launch: `pagetrace launch PACK -- CMD`, the fast path. See launch.h and
 * launch.1. Checks the pack and its files, starts the prefetch beside the
 * start in a grandchild, and execs CMD (its exit status is CMD's), in
 * about a millisecond: the launch's own time is on the start's path. */
#include "launch.h"
#include "clock.h"
#include "errmsg.h"
#include "escape.h"
#include "option.h"

#include <argp.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "option_table.h"

#define DEFAULT_MAX_AGE_S (30u * 86400u)
#define DEFAULT_PACKS_DIR "/var/lib/pagetrace/packs"
/* The Python planner, run with this launcher's path as argv[1] (its
 * argv[0]: the C tools, pagetrace-replay among them, are found beside it)
 * and the package's directory as argv[2]. */
#define PLANNER_CODE "import sys; sys.argv[0] = sys.argv.pop(1); " \
	"sys.path.insert(0, sys.argv.pop(1)); " \
	"from pagetrace.tools.launch import main; sys.exit(main())"

const char *argp_program_version = "launch (pagetrace) " PAGETRACE_VERSION;

static const char doc[] =
	"Prefetch the pages of a pack made by pagetrace pack, in the mode the "
	"device calls for, and start CMD; the exit status is CMD's. Installed "
	"as pagetrace-launch; `pagetrace launch` runs it.\v"
	"EXAMPLES:\n"
	"  pagetrace launch firefox.pack -- firefox-esr --headless --screenshot /tmp/s.png\n"
	"  pagetrace launch firefox-esr-1a2b3c4d -- firefox-esr ...   # from the packs dir\n"
	"  sudo pagetrace launch --refine app.pack -- ./app    # prefetch, record, update\n"
	"  pagetrace launch --mode sorted --max-age 7d app.pack -- ./app\n"
	"  ExecStart=/usr/local/bin/pagetrace-launch /var/lib/pagetrace/packs/d.pack -- /usr/sbin/d\n"
	"\n"
	"Where requests are cheap (no rotational disk, no blk-throttle read cap "
	"on this cgroup) the prefetch runs beside CMD in first-access order, at "
	"most --window in flight; otherwise, and for --mode sorted or planned "
	"and --refine, the launch is handed to the Python planner "
	"(pagetrace.tools.launch), which models the device. Nothing is written "
	"to the files; a pack that cannot be used (another format version, "
	"corrupt, too old, every file changed) is reported on one line and CMD "
	"starts without prefetch (with --strict: exit 1 instead).\n"
	"\n"
	"Exit status: CMD's; 127 CMD not found; 1 with --strict when the pack "
	"cannot be used; 2 bad usage.";

static const char args_doc[] = "PACK -- CMD [ARGS...]";

void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verrmsg(NULL, fmt, ap);
	va_end(ap);
}

/* --max-age: seconds, minutes, hours or days (a bare number: days). */
static const struct number_units age_units = {
	"an age (a number with s, m, h or d; default d)",
	{{"", 86400}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400},
	 {NULL, 0}},
};

static const struct option_word modes[] = {
	{"auto", MODE_AUTO}, {"concurrent", MODE_CONCURRENT},
	{"planned", MODE_PLANNER}, {"sorted", MODE_PLANNER},
	{"none", MODE_NONE}, {NULL, 0},
};

static const struct option_word verifies[] = {
	{"auto", VERIFY_AUTO}, {"stat", VERIFY_STAT},
	{"content", VERIFY_CONTENT}, {NULL, 0},
};

static error_t parse_opt(int key, char *arg, struct argp_state *state)
{
	struct options *o = state->input;

	switch (key) {
	case OPT_MODE:
		o->mode = word_option("--mode", arg, modes);
		break;
	case OPT_VERIFY:
		o->verify = word_option("--verify", arg, verifies);
		break;
	case OPT_MAX_AGE:
		o->max_age_s = number_option("--max-age", arg, &age_units, 0,
					     UINT64_MAX);
		break;
	case OPT_WINDOW:
		o->window = number_option("--window", arg, &size_units, 1,
					  UINT64_MAX);
		break;
	case OPT_BATCH:
		o->batch.bytes = number_option("--batch", arg, &size_units, 0,
					       UINT64_MAX);
		break;
	case OPT_BATCH_GAP:
		o->batch.gap = number_option("--batch-gap", arg, NULL, 0,
					     UINT64_MAX / 2);
		break;
	case OPT_GAP: /* the planner's: checked here, as a number of pages */
		number_option("--gap", arg, NULL, 0, UINT64_MAX);
		break;
	case OPT_LEAD: /* the planner's: auto, or milliseconds */
		if (strcmp(arg, "auto") == 0)
			break;
		if (!*arg || arg[strspn(arg, "0123456789")]) {
			errmsg("--lead", "'%s': not auto or milliseconds", arg);
			exit(2);
		}
		number_option("--lead", arg, NULL, 0, 600000);
		break;
	case OPT_REFINE: o->refine = 1; break;
	case OPT_REPLAY: break; /* the planner's */
	case OPT_REPORT: o->report = arg; break;
	case OPT_STRICT: o->strict = 1; break;
	case 'q': o->quiet = 1; break;
	case ARGP_KEY_ARG:
	case ARGP_KEY_END:
		one_operand(state, key, arg, &o->pack,
			    "one PACK, then -- and the command",
			    "give the pack, then -- and the command to start");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static int is_executable_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* shutil.which: a path with a slash must be an executable file; a name is
 * looked up in PATH. */
static int command_exists(const char *name)
{
	const char *path = getenv("PATH");
	char candidate[PATH_MAX];

	if (strchr(name, '/'))
		return is_executable_file(name);
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		size_t len = strcspn(path, ":");

		snprintf(candidate, sizeof(candidate), "%.*s/%s", (int)len, path, name);
		if (len && is_executable_file(candidate))
			return 1;
		path += len + (path[len] == ':');
	}
	return 0;
}

/* The pack: the argument if it names a file or has a slash, else NAME or
 * NAME.pack in the packs directory. */
static const char *find_pack(const char *name, char *buf, size_t len)
{
	const char *dir = getenv("PAGETRACE_PACKS");

	if (strchr(name, '/') || access(name, F_OK) == 0)
		return name;
	if (!dir)
		dir = DEFAULT_PACKS_DIR;
	snprintf(buf, len, "%s/%s", dir, name);
	if (access(buf, F_OK) == 0)
		return buf;
	snprintf(buf, len, "%s/%s.pack", dir, name);
	if (access(buf, F_OK) == 0)
		return buf;
	return name;
}

/* The Python package beside this binary: TOP/analysis in the source tree,
 * PREFIX/share/pagetrace installed. */
static int planner_dir(char *self, char *dir, size_t len)
{
	char exe[PATH_MAX], candidate[PATH_MAX + 64];
	static const char *const under[] = {"analysis", "share/pagetrace"};
	char *slash;

	if (!realpath("/proc/self/exe", exe))
		return -1;
	memcpy(self, exe, sizeof(exe));
	for (int up = 0; up < 2; up++) {
		if (!(slash = strrchr(exe, '/')))
			return -1;
		*slash = '\0';
	}
	for (size_t i = 0; i < 2; i++) {
		snprintf(candidate, sizeof(candidate), "%s/%s/pagetrace/__init__.py",
			 exe, under[i]);
		if (access(candidate, R_OK) == 0 &&
		    snprintf(dir, len, "%s/%s", exe, under[i]) < (int)len)
			return 0;
	}
	return -1;
}

/* Hands the whole launch, ARGV as given, to the Python planner; returns
 * only when it cannot be started. */
static void hand_to_planner(int argc, char **argv)
{
	const char *python = getenv("PAGETRACE_PYTHON");
	char dir[PATH_MAX], self[PATH_MAX];
	char **args = calloc((size_t)argc + 8, sizeof(*args));
	int n = 0;

	if (!args || planner_dir(self, dir, sizeof(dir)) != 0) {
		say("warning: the Python planner (pagetrace.tools.launch) is not "
		    "beside %s: install pagetrace whole (make install)", argv[0]);
		free(args);
		return;
	}
	if (!python)
		python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
	args[n++] = (char *)python;
	args[n++] = "-I";
	args[n++] = "-S";
	args[n++] = "-c";
	args[n++] = PLANNER_CODE;
	args[n++] = self;
	args[n++] = dir;
	for (int i = 1; i < argc; i++)
		args[n++] = argv[i];
	fflush(NULL);
	execvp(python, args);
	say("warning: %s: %s: the planner cannot run", python, strerror(errno));
	free(args);
}

static void exec_command(char **command)
{
	fflush(NULL);
	execvp(command[0], command);
	say("%s: %s", command[0], strerror(errno));
	exit(errno == ENOENT ? 127 : 126);
}

/* The one line that names the files not prefetched, if any. */
static void say_skipped(const struct pack *pack, const struct skipped *s)
{
	char *line;

	if (count_kept(s) == pack->n_files)
		return;
	line = skipped_line(pack, s);
	if (line)
		say("%s", line);
	free(line);
}

/* The prefetch holds no end of CMD's input or output: a reader of CMD's
 * output sees its end when CMD ends, not when the prefetch does. Its
 * warnings go to stderr. */
static void leave_cmd_output(void)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		close(null);
	}
}

/* Forked twice, so that the prefetch is nobody's zombie once CMD has
 * replaced this process and CMD starts without waiting for it. */
static void start_beside(const struct pack *pack, struct skipped *s,
			 int verify, const struct options *o)
{
	pid_t child = fork();

	if (child == 0) {
		if (fork() == 0) {
			leave_cmd_output();
			if (verify) {
				verify_content(pack, s);
				say_skipped(pack, s);
			}
			if (count_kept(s))
				prefetch(pack, s, o->window, &o->batch);
		}
		_exit(0);
	}
	if (child > 0)
		waitpid(child, NULL, 0);
	else
		say("warning: fork: %s: starting without prefetch", strerror(errno));
}

struct launch {
	struct options o;
	struct report report;
	struct pack pack;
	struct skipped skipped;
	double started;
};

static void finish(struct launch *l)
{
	l->report.launch_s = monotonic_s() - l->started;
	if (l->o.report && write_report(l->o.report, &l->report) != 0)
		say("warning: --report %s: %s", l->o.report, strerror(errno));
	exec_command(l->o.command);
}

static void unusable(struct launch *l, const char *message)
{
	if (l->o.strict) {
		say("%s", message);
		exit(1);
	}
	say("%s: starting without prefetch", message);
	l->report.problem = message;
	finish(l);
}

static void check_pack(struct launch *l)
{
	char buf[PATH_MAX], why[512], *message = NULL;
	const char *path = find_pack(l->o.pack, buf, sizeof(buf));
	double age;

	if (packfile_read(path, &l->pack, why, sizeof(why)) != PACKFILE_OK) {
		if (asprintf(&message, "%s: %s", path, why) < 0)
			message = why;
		unusable(l, message);
	}
	l->report.data = &l->pack;
	age = (double)time(NULL) - (double)l->pack.created;
	if (age > (double)l->o.max_age_s) {
		char *escaped = escape_string(path);

		if (asprintf(&message, "%s: the pack is %.1f days old, older than "
			     "--max-age %g days: record it again (pagetrace pack, or "
			     "--refine)", escaped ? escaped : path, age / 86400,
			     (double)l->o.max_age_s / 86400) < 0)
			message = "the pack is too old";
		unusable(l, message);
	}
}

/* argp names the program after argv[0]: the messages say PROG. */
static void parse_options(const struct argp *argp, int argc, char **argv,
			  struct options *o)
{
	char **named = malloc(((size_t)argc + 1) * sizeof(*named));

	if (!named) {
		say("out of memory");
		exit(1);
	}
	memcpy(named, argv, (size_t)argc * sizeof(*named));
	named[0] = PROG;
	named[argc] = NULL;
	argp_parse(argp, argc, named, 0, 0, o);
	free(named);
}

int main(int argc, char **argv)
{
	struct argp argp = {argp_options, parse_opt, args_doc, doc, 0, 0, 0};
	struct launch l = {.o = {.max_age_s = DEFAULT_MAX_AGE_S,
				 .window = DEFAULT_WINDOW,
				 .batch = {0, DEFAULT_BATCH_GAP}}};
	char *device = NULL;
	int cut, verify, kept;

	l.started = monotonic_s();
	errmsg_init(PROG);
	for (cut = 1; cut < argc && strcmp(argv[cut], "--"); cut++)
		;
	argp_err_exit_status = 2;
	parse_options(&argp, cut, argv, &l.o);
	if (cut + 1 >= argc) {
		say("give, after --, the command to start");
		fprintf(stderr, "Try '%s --help' for more information.\n", PROG);
		return 2;
	}
	l.o.command = argv + cut + 1;
	if (!command_exists(l.o.command[0])) {
		char *escaped = escape_string(l.o.command[0]);

		say("%s: command not found", escaped ? escaped : l.o.command[0]);
		return 127;
	}
	if (l.o.refine || l.o.mode == MODE_PLANNER)
		hand_to_planner(argc, argv);
	l.report.pack = l.o.pack;
	check_pack(&l);
	if (check_files(&l.pack, &l.skipped) != 0)
		unusable(&l, "out of memory");
	l.report.skipped = &l.skipped;
	kept = count_kept(&l.skipped) > 0;
	if (kept && l.o.mode != MODE_NONE) {
		if (!cheap_devices(&l.pack, &l.skipped, &device)) {
			if (l.o.mode == MODE_AUTO) {
				hand_to_planner(argc, argv);
				unusable(&l, "the device needs the planner, which cannot run");
			}
			free(device);
			device = strdup("mode given");
		}
		l.o.mode = MODE_CONCURRENT;
		l.report.device = device;
	}
	/* As the planner reports it: the mode asked for when nothing is
	 * left to prefetch. */
	l.report.mode = !kept && l.o.mode == MODE_AUTO ? "auto" :
			l.o.mode == MODE_NONE ? "none" : "concurrent";
	verify = l.o.verify == VERIFY_CONTENT ||
		 (l.o.verify == VERIFY_AUTO && l.o.mode == MODE_CONCURRENT);
	/* Beside the start with the content check, the prefetching child
	 * says it, after the check. */
	if (!(kept && l.o.mode == MODE_CONCURRENT && verify))
		say_skipped(&l.pack, &l.skipped);
	if (!kept || l.o.mode == MODE_NONE)
		finish(&l);
	if (!l.o.quiet)
		say("prefetching %zu of %zu files, concurrent beside the start (%s)",
		    count_kept(&l.skipped), l.pack.n_files, device);
	l.report.window = l.o.window;
	l.report.batch = &l.o.batch;
	start_beside(&l.pack, &l.skipped, verify, &l.o);
	finish(&l);
	return 0;
}
