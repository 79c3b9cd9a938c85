/* launch: prefetch a pack's pages beside a command's start and exec the
 * command (docs/prefetch-packs.md). The fast path of `pagetrace launch`:
 * where requests are cheap it does the whole launch; where seeks or a
 * read cap call for a planned, sorted prefetch before the start, or for
 * --refine, it hands the launch to the Python planner
 * (pagetrace.tools.launch), which has the device models. */
#ifndef PAGETRACE_LAUNCH_H
#define PAGETRACE_LAUNCH_H

#include "packfile.h"

#include <stddef.h>
#include <stdint.h>

#define PROG "pagetrace launch"
/* --window's default: measured on firefox-esr (docs/lab/case-study-firefox.md,
 * "2026-11-27"), 1 MiB in flight beat 512K, 2M and no limit. */
#define DEFAULT_WINDOW (1u << 20)
/* --batch-gap's default. */
#define DEFAULT_BATCH_GAP 16
/* A random read this slow (us, the pack's request-us) is a seek. */
#define SEEK_US 2000

enum launch_mode { MODE_AUTO, MODE_CONCURRENT, MODE_NONE, MODE_PLANNER };
enum verify { VERIFY_AUTO, VERIFY_STAT, VERIFY_CONTENT };

/* --batch, --batch-gap: bytes of ranges per batch (0: none), pages. */
struct batching {
	uint64_t bytes, gap;
};

struct options {
	enum launch_mode mode;
	enum verify verify;
	uint64_t max_age_s;
	uint64_t window;
	struct batching batch;
	const char *pack;
	const char *report;
	int strict, quiet, refine;
	char **command;
};

/* Why each file of the pack is not prefetched (NULL: it is). */
struct skipped {
	char **reason;           /* per file; owned strings */
	size_t n_files;
};

/* files.c */
int check_files(const struct pack *pack, struct skipped *skipped);
int verify_content(const struct pack *pack, struct skipped *skipped);
size_t count_kept(const struct skipped *skipped);
char *skipped_line(const struct pack *pack, const struct skipped *skipped);
void skipped_free(struct skipped *skipped);

/* device.c: 1 when every kept file's device answers requests cheaply
 * (WHY: the reason, as the Python planner words it); 0 when the planner
 * must choose. */
int cheap_devices(const struct pack *pack, const struct skipped *skipped,
		  char **why);

/* prefetch.c: the requests of the kept files (plan_requests),
 * posix_fadvise(WILLNEED), at most WINDOW bytes asked for and not yet
 * read back. */
struct request {
	size_t file;
	uint64_t page, pages;
	size_t first;            /* the pack index of its first-used range */
};
void prefetch(const struct pack *pack, const struct skipped *skipped,
	      uint64_t window, const struct batching *batch);
/* The requests into OUT (room for the pack's ranges): the kept ranges in
 * the pack's order, or batched and merged (BATCH->bytes); their count.
 * *FILLED: the pages read between merged ranges. */
size_t plan_requests(const struct pack *pack, const struct skipped *skipped,
		     const struct batching *batch, struct request *out,
		     uint64_t *filled);

/* report.c: --report's JSON. */
struct report {
	const char *pack, *mode, *device, *problem;
	const struct pack *data;
	const struct skipped *skipped;
	uint64_t window;
	const struct batching *batch;
	double launch_s;
};
int write_report(const char *path, const struct report *r);

void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
