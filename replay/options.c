/* Command line of replay. Conflicts are checked once everything is parsed,
 * so the order of options never matters. */
#include "replay.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
"USAGE\n"
"  replay [OPTIONS] TRACE\n"
"\n"
"Re-issues the page reads recorded in TRACE (pagetrace trace format v1, '-'\n"
"for stdin) with O_DIRECT, measured, in the original or the on-disk order;\n"
"or fills the page cache with them (--prefetch). Never writes to any file.\n"
"\n"
"ORDER\n"
"  (default)             original trace order\n"
"  -s, --sorted          physical order on each device (FIEMAP), requests\n"
"                        adjacent on disk merged again\n"
"      --sort=KEY        KEY is original, disk (= --sorted) or file (path\n"
"                        and offset, for filesystems without FIEMAP)\n"
"\n"
"GROUPING\n"
"  -m, --max-request=BYTES  largest request, K/M/G suffixes (default 1M)\n"
"  -G, --no-group        one request per traced page\n"
"\n"
"I/O\n"
"  -b, --buffered        normal reads after evicting the files, for\n"
"                        filesystems that refuse O_DIRECT\n"
"  -p, --prefetch        fill the page cache (readahead) instead of reading;\n"
"                        ranges already cached are skipped\n"
"  -e, --evict           drop the trace's files from the page cache first\n"
"  -q, --queue-depth=N   keep N requests in flight (threads; default 1)\n"
"  -t, --timing          keep the trace's gaps between requests\n"
"      --strict          stop at the first bad input\n"
"\n"
"OUTPUT\n"
"  -j, --json            results as one JSON object on stdout\n"
"  -n, --plan, --dry-run print the request plan as CSV, do no I/O\n"
"  -h, --help            this text\n"
"\n"
"EXAMPLES\n"
"  replay reads.log                       original order, O_DIRECT, timed\n"
"  replay --sorted reads.log              on-disk order\n"
"  replay --sorted --prefetch reads.log   fill the page cache in disk order\n"
"  replay --plan --sorted reads.log > plan.csv\n"
"  trace -- app | replay --evict --json -\n";

enum long_only { OPT_SORT = 256, OPT_STRICT };

static const struct option long_options[] = {
	{"sorted", no_argument, NULL, 's'},
	{"sort", required_argument, NULL, OPT_SORT},
	{"max-request", required_argument, NULL, 'm'},
	{"no-group", no_argument, NULL, 'G'},
	{"buffered", no_argument, NULL, 'b'},
	{"prefetch", no_argument, NULL, 'p'},
	{"evict", no_argument, NULL, 'e'},
	{"queue-depth", required_argument, NULL, 'q'},
	{"timing", no_argument, NULL, 't'},
	{"strict", no_argument, NULL, OPT_STRICT},
	{"json", no_argument, NULL, 'j'},
	{"plan", no_argument, NULL, 'n'},
	{"dry-run", no_argument, NULL, 'n'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/* "1048576", "1M", "512k": bytes, with binary suffixes. */
static int parse_size(const char *text, uint64_t *bytes)
{
	unsigned long long value;
	char *end;
	int shift = 0;

	errno = 0;
	if (text[0] < '0' || text[0] > '9')
		return -1;
	value = strtoull(text, &end, 10);
	if (errno)
		return -1;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (*end || value > (UINT64_MAX >> shift))
		return -1;
	*bytes = (uint64_t)value << shift;
	return 0;
}

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

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "replay: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'replay --help'.\n");
	return -1;
}

struct seen {
	int order_options;   /* how many of --sorted/--sort were given */
	enum replay_order first_order;
	int buffered, prefetch;
};

static int check_conflicts(const struct options *opt, const struct seen *seen)
{
	if (seen->order_options > 1 && opt->order != seen->first_order)
		return usage_error("%s", "--sorted and --sort=KEY disagree");
	if (seen->buffered && seen->prefetch)
		return usage_error("%s", "--buffered and --prefetch conflict");
	if (opt->json && opt->plan)
		return usage_error("%s", "--json and --plan both write stdout");
	if (!opt->grouped && opt->max_request_given)
		return usage_error("%s", "--no-group and --max-request conflict");
	if (opt->timing && opt->order != ORDER_ORIGINAL)
		return usage_error("%s", "--timing needs the original order");
	if (opt->plan && opt->evict)
		return usage_error("%s", "--plan does no I/O: drop --evict");
	if (opt->max_request == 0)
		return usage_error("%s", "--max-request must be positive");
	return 0;
}

static int parse_one(int c, const char *arg, struct options *opt,
		     struct seen *seen)
{
	enum replay_order order = ORDER_SORTED;
	unsigned long depth;
	char *end;

	switch (c) {
	case OPT_SORT:
		if (parse_order(arg, &order) < 0)
			return usage_error("unknown sort key '%s'", arg);
		/* fall through */
	case 's':
		if (seen->order_options++ == 0)
			seen->first_order = order;
		opt->order = order;
		return 0;
	case 'm':
		if (parse_size(arg, &opt->max_request) < 0)
			return usage_error("bad --max-request '%s'", arg);
		opt->max_request_given = 1;
		return 0;
	case 'G': opt->grouped = 0; return 0;
	case 'b': opt->mode = MODE_BUFFERED; seen->buffered = 1; return 0;
	case 'p': opt->mode = MODE_PREFETCH; seen->prefetch = 1; return 0;
	case 'e': opt->evict = 1; return 0;
	case 't': opt->timing = 1; return 0;
	case OPT_STRICT: opt->strict = 1; return 0;
	case 'j': opt->json = 1; return 0;
	case 'n': opt->plan = 1; return 0;
	case 'q':
		errno = 0;
		depth = strtoul(arg, &end, 10);
		if (errno || *end || arg[0] < '1' || arg[0] > '9' ||
		    depth > MAX_QUEUE_DEPTH)
			return usage_error("bad --queue-depth '%s' (1 to 256)",
					   arg);
		opt->queue_depth = (int)depth;
		return 0;
	}
	return usage_error("%s", "unknown option");
}

/* Returns 0 to go on, 1 after --help, -1 on a usage error. */
int parse_options(int argc, char **argv, struct options *opt)
{
	struct seen seen = {0, ORDER_ORIGINAL, 0, 0};
	int c;

	memset(opt, 0, sizeof(*opt));
	opt->grouped = 1;
	opt->max_request = DEFAULT_MAX_REQUEST;
	opt->queue_depth = 1;
	while ((c = getopt_long(argc, argv, "sm:Gbpeq:tjnh", long_options,
				NULL)) != -1) {
		if (c == 'h') {
			fputs(usage_text, stdout);
			return 1;
		}
		if (c == '?')
			return usage_error("%s", "bad option");
		if (parse_one(c, optarg, opt, &seen) < 0)
			return -1;
	}
	if (optind != argc - 1)
		return usage_error("%s", optind == argc ?
				   "no TRACE given" : "more than one TRACE");
	opt->trace = argv[optind];
	if (check_conflicts(opt, &seen) < 0)
		return -1;
	/* Buffered reads only measure anything on a cold cache. */
	if (opt->mode == MODE_BUFFERED)
		opt->evict = 1;
	return 0;
}
