/* Shared types of replay: the trace's files and pages, the request plan,
 * options and counters. See replay.1 and docs/replay.md. */
#ifndef PAGETRACE_REPLAY_H
#define PAGETRACE_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "errmsg.h"
#include "throttle.h"
#include "tracefile.h"

/* PAGETRACE_VERSION comes from analysis/pagetrace/VERSION (the Makefile). */
#define REPLAY_VERSION PAGETRACE_VERSION
/* Chosen by measurement, see docs/replay.md: on the test VM O_DIRECT
 * throughput stops growing at about this request size. */
#define DEFAULT_MAX_REQUEST (1024 * 1024)
#define MAX_QUEUE_DEPTH 256
#define PHYSICAL_UNKNOWN UINT64_MAX

enum replay_order { ORDER_ORIGINAL, ORDER_SORTED, ORDER_FILE };
enum replay_mode { MODE_DIRECT, MODE_BUFFERED, MODE_PREFETCH };

/* The `skipped` keys of the --json contract, in its order: each reason's
 * enum constant (SKIP_ and the key in capitals) and its key. */
#define SKIP_REASONS(X) \
	X(SKIP_MISSING, "missing") X(SKIP_NOT_REGULAR, "not_regular") \
	X(SKIP_SHORT_FILE, "short_file") X(SKIP_MALFORMED, "malformed") \
	X(SKIP_BAD_OFFSET, "bad_offset") X(SKIP_SPECIAL_PATH, "special_path") \
	X(SKIP_ODIRECT_REFUSED, "odirect_refused") \
	X(SKIP_IO_ERROR, "io_error") X(SKIP_NOT_READABLE, "not_readable")

#define SKIP_ENUM(constant, key) constant,
enum skip_reason { SKIP_REASONS(SKIP_ENUM) SKIP_COUNT };
#undef SKIP_ENUM

struct options {
	const char *trace;        /* "-" for stdin */
	enum replay_order order;
	enum replay_mode mode;
	int grouped;
	uint64_t max_request;
	int max_request_given;
	uint64_t window;          /* --window: prefetch bytes in flight, 0 all */
	int queue_depth;
	int timing;
	int evict;
	int strict;
	int json;
	int plan;
	int used;                 /* --used: only read pages also accessed */
	int first_reads;          /* --first-reads: each page once */
	int quiet;
	struct throttle_limits throttle;  /* --throttle, --device-profile */
	const char *cgroup;       /* --cgroup DIR: joined before the reads */
	const char *drive_profile; /* --device-profile of diskemu's, or NULL */
	const char *latencies;    /* --latencies FILE: one row per request */
};

struct extent {
	uint64_t logical, physical, length;
};

enum file_state { FILE_PENDING, FILE_OPEN, FILE_SKIPPED };

struct replay_file {
	char *path;
	size_t path_len;
	enum file_state state;
	enum skip_reason skip;     /* why, when state == FILE_SKIPPED */
	int fd;
	dev_t dev;
	uint64_t size;
	uint64_t align;            /* O_DIRECT offset/length alignment */
	struct extent *extents;    /* sorted by logical offset */
	size_t n_extents;
	int has_pages;             /* pages to replay: open it */
	int special_reported;      /* a // path, reported once */
	int short_reported;
	size_t device_rank;        /* order of first appearance of dev */
	int used;                  /* at least one request completed */
};

/* One traced page, in trace order. */
struct page {
	size_t file;
	uint64_t offset;
	uint64_t timestamp_us;
};

/* A page with an access or map record (--used). */
struct used_page {
	size_t file;
	uint64_t offset;
	uint64_t timestamp_us;     /* of its first access or map record */
	size_t seq;                /* that record's rank among them */
	int read;                  /* it also has a read record */
};

struct request {
	size_t file;
	uint64_t offset, length;   /* file range, clamped to the file size */
	uint64_t physical;         /* of offset, or PHYSICAL_UNKNOWN */
	uint64_t physical_end;     /* one past the last byte's, or unknown */
	uint64_t timestamp_us;     /* of the first page, for --timing */
	uint64_t bytes_done;       /* traced bytes read (or prefetched) */
	int done;                  /* completed successfully */
	int resident;              /* --prefetch: already cached, skipped */
	int waited;                /* --window: read back already */
	uint64_t start_ns, end_ns; /* issue and completion, from the run's
				      start (--latencies) */
};

struct replay_stats {
	uint64_t requests, bytes, pages, files;
	uint64_t seeks, seek_distance;
	uint64_t already_resident;
	uint64_t late_requests, worst_lateness_us;  /* --timing */
	double elapsed_s;
};

struct replay {
	struct options opt;
	uint64_t page_size;
	struct replay_file *files;
	size_t n_files, files_cap;
	size_t *file_index;        /* open-addressing hash: file + 1, 0 free */
	size_t index_cap;
	struct page *pages;
	size_t n_pages, pages_cap;
	size_t n_records;          /* read records, well-formed or not, for
				      the exit status */
	uint64_t kind_records[TRACEFILE_KIND_COUNT]; /* well-formed, by kind */
	struct used_page *used;    /* --used: access and map records */
	size_t n_used, used_cap;
	uint64_t unused_pages;     /* read pages left out by --used */
	uint64_t repeated_reads;   /* read records left out by --first-reads */
	struct request *requests;
	size_t n_requests;
	uint64_t skipped[SKIP_COUNT];
	struct replay_stats stats;
	int fatal;                 /* --strict tripped, or a fatal error */
	dev_t throttle_disks[THROTTLE_MAX_DISKS];
	size_t n_throttle_disks;
	struct throttle_counts throttled;  /* the cgroup's own counters */
	/* throttle_budget.c: the untimed reads that spent blk-throttle's
	 * first slice, how many disks they made wait, and the counters
	 * after them (subtracted from `throttled`). */
	uint64_t budget_reads;
	size_t budget_spent_disks;
	struct throttle_counts budget_counts;
};

/* skipped.c: one line `replay: PATH: reason` per bad input; COUNT pages
 * are added to the REASON tally. Under --strict the first one stops the
 * replay. */
void skip_message(struct replay *r, enum skip_reason reason, uint64_t count,
		  const char *path, size_t path_len, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
/* REASON's key in --json's `skipped`, and its word in the summary. */
const char *skip_name(enum skip_reason reason);

/* options.c */
void parse_options(int argc, char **argv, struct options *opt);

/* files.c */
long intern_file(struct replay *r, const char *path, size_t path_len);
void open_files(struct replay *r);
void evict_files(struct replay *r);
void close_files(struct replay *r);

/* physical.c */
void map_file_extents(struct replay *r, struct replay_file *file);
uint64_t dio_alignment(int fd, const struct replay_file *file);
uint64_t physical_of(const struct replay_file *file, uint64_t offset);
uint64_t extent_end(const struct replay_file *file, uint64_t offset);

/* plan.c */
int load_trace(struct replay *r);
int build_plan(struct replay *r);
void count_seeks(struct replay *r);

/* first_reads.c: keeps each page's first read record, in trace order;
 * -1 when out of memory. */
int keep_first_reads(struct replay *r);

/* io.c */
int run_requests(struct replay *r);

/* throttle_budget.c */
void throttle_spend_budget(struct replay *r);

/* report.c */
void print_plan(const struct replay *r);
void print_json(const struct replay *r);
void print_summary(const struct replay *r);
int write_latencies(const struct replay *r);

#endif
