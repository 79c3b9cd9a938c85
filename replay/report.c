/* What replay prints: the summary on stderr, --json and --plan on stdout
 * (contracts in docs/data-formats.md). */
#include "replay.h"
#include "json.h"
#include "tracefile.h"
#include "escape.h"
#include "size.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

static const char *order_name(enum replay_order order)
{
	return order == ORDER_SORTED ? "sorted" :
	       order == ORDER_FILE ? "file" : "original";
}

static const char *mode_name(enum replay_mode mode)
{
	return mode == MODE_BUFFERED ? "buffered" :
	       mode == MODE_PREFETCH ? "prefetch" : "direct";
}

static double mib_per_s(const struct replay_stats *s)
{
	return s->elapsed_s > 0 ?
	       (double)s->bytes / (1024.0 * 1024.0) / s->elapsed_s : 0.0;
}

static double mean_request_bytes(const struct replay_stats *s)
{
	return s->requests ? (double)s->bytes / (double)s->requests : 0.0;
}

/* Largest request the plan allowed: one page when not grouping. */
static uint64_t max_request_bytes(const struct replay *r)
{
	return r->opt.grouped ? r->opt.max_request : r->page_size;
}

/* The columns --plan and --latencies share: order, path, offset, length,
 * dev, physical_offset. */
static void print_request_columns(FILE *out, const struct replay *r,
				  size_t i)
{
	const struct request *q = &r->requests[i];
	const struct replay_file *f = &r->files[q->file];

	fprintf(out, "%zu,", i);
	/* A comma in a name would split the row: \054 too. */
	escape_write(out, f->path, f->path_len, ",");
	fprintf(out, ",%llu,%llu,%u:%u,", (unsigned long long)q->offset,
		(unsigned long long)q->length, major(f->dev), minor(f->dev));
	if (q->physical != PHYSICAL_UNKNOWN)
		fprintf(out, "%llu", (unsigned long long)q->physical);
}

void print_plan(const struct replay *r)
{
	size_t i;

	puts("order,path,offset,length,dev,physical_offset");
	for (i = 0; i < r->n_requests; i++) {
		print_request_columns(stdout, r, i);
		putchar('\n');
	}
}

/* --latencies: the plan's columns, then when each completed request was
 * issued and how long it took (ns, from the start of the timed run). */
int write_latencies(const struct replay *r)
{
	int to_stdout = strcmp(r->opt.latencies, "-") == 0;
	FILE *out = to_stdout ? stdout : fopen(r->opt.latencies, "w");
	size_t i;

	if (!out) {
		errmsg(r->opt.latencies, "%s", errmsg_strerror(errno));
		return -1;
	}
	fputs("order,path,offset,length,dev,physical_offset,bytes,start_ns,"
	      "latency_ns\n", out);
	for (i = 0; i < r->n_requests; i++) {
		const struct request *q = &r->requests[i];

		if (!q->done)
			continue;
		print_request_columns(out, r, i);
		fprintf(out, ",%llu,%llu,%llu\n",
			(unsigned long long)q->bytes_done,
			(unsigned long long)q->start_ns,
			(unsigned long long)(q->end_ns - q->start_ns));
	}
	if ((to_stdout ? fflush(out) : fclose(out)) != 0) {
		errmsg(r->opt.latencies, "%s", errmsg_strerror(errno));
		return -1;
	}
	return 0;
}

static void print_json_skipped(const struct replay *r)
{
	int i;

	fputs("\"skipped\": {", stdout);
	for (i = 0; i < SKIP_COUNT; i++)
		printf("%s\"%s\": %llu", i ? ", " : "", skip_name(i),
		       (unsigned long long)r->skipped[i]);
	fputs("}", stdout);
}

void print_json(const struct replay *r)
{
	const struct replay_stats *s = &r->stats;

	fputs("{\"tool\": \"replay\", \"format\": 1, \"trace\": ", stdout);
	json_puts(stdout, r->opt.trace);
	printf(", \"order\": \"%s\", \"mode\": \"%s\", \"grouped\": %s, "
	       "\"max_request_bytes\": %llu, \"queue_depth\": %d, ",
	       order_name(r->opt.order), mode_name(r->opt.mode),
	       r->opt.grouped ? "true" : "false",
	       (unsigned long long)max_request_bytes(r), r->opt.queue_depth);
	printf("\"requests\": %llu, \"pages\": %llu, \"bytes\": %llu, "
	       "\"files\": %llu, \"elapsed_s\": %.6f, \"mib_per_s\": %.3f, "
	       "\"mean_request_bytes\": %.1f, \"seeks\": %llu, "
	       "\"seek_distance_bytes\": %llu, ",
	       (unsigned long long)s->requests, (unsigned long long)s->pages,
	       (unsigned long long)s->bytes, (unsigned long long)s->files,
	       s->elapsed_s, mib_per_s(s), mean_request_bytes(s),
	       (unsigned long long)s->seeks,
	       (unsigned long long)s->seek_distance);
	print_json_skipped(r);
	printf(", \"used\": %s, \"trace_records\": {\"read\": %llu, "
	       "\"access\": %llu, \"map\": %llu}, \"unused_pages\": %llu, ",
	       r->opt.used ? "true" : "false",
	       (unsigned long long)r->kind_records[TRACEFILE_KIND_READ],
	       (unsigned long long)r->kind_records[TRACEFILE_KIND_ACCESS],
	       (unsigned long long)r->kind_records[TRACEFILE_KIND_MAP],
	       (unsigned long long)r->unused_pages);
	throttle_print_json(r);
	fputs(", \"cgroup\": ", stdout);
	json_puts_or_null(stdout, r->opt.cgroup);
	fputs("}\n", stdout);
}

static void print_skipped_summary(const struct replay *r)
{
	int i, any = 0;

	fprintf(stderr, "%s: skipped pages:", errmsg_tool());
	for (i = 0; i < SKIP_COUNT; i++) {
		if (!r->skipped[i])
			continue;
		fprintf(stderr, "%s %llu %s", any ? "," : "",
			(unsigned long long)r->skipped[i], skip_name(i));
		any = 1;
	}
	fputs(any ? "\n" : " none\n", stderr);
}

/* Access and map records (trace --used) are used only with --used. */
static void print_kinds_summary(const struct replay *r)
{
	uint64_t access = r->kind_records[TRACEFILE_KIND_ACCESS];
	uint64_t map = r->kind_records[TRACEFILE_KIND_MAP];

	if (r->opt.first_reads)
		fprintf(stderr, "%s: --first-reads: %llu repeated read records "
			"left out\n", errmsg_tool(),
			(unsigned long long)r->repeated_reads);
	if (r->opt.used)
		fprintf(stderr, "%s: --used: %llu read pages used, %llu left "
			"out as unused\n", errmsg_tool(),
			(unsigned long long)r->n_pages,
			(unsigned long long)r->unused_pages);
	else if (access + map > 0)
		fprintf(stderr, "%s: %llu access and %llu map records ignored "
			"(--used replays only the used pages)\n", errmsg_tool(),
			(unsigned long long)access, (unsigned long long)map);
}

void print_summary(const struct replay *r)
{
	const struct replay_stats *s = &r->stats;
	const char *tool = errmsg_tool();
	char total[32], mean[32], distance[32];

	fprintf(stderr, "%s: %s order, %s, %s up to %llu bytes, "
		"queue depth %d\n", tool, order_name(r->opt.order),
		mode_name(r->opt.mode),
		r->opt.grouped ? "grouped" : "ungrouped",
		(unsigned long long)max_request_bytes(r), r->opt.queue_depth);
	fprintf(stderr, "%s: %llu requests, %s from %llu files in %.3f s: "
		"%.1f MiB/s\n", tool, (unsigned long long)s->requests,
		format_bytes(s->bytes, total, sizeof(total)),
		(unsigned long long)s->files, s->elapsed_s, mib_per_s(s));
	fprintf(stderr, "%s: mean request %s, %llu seeks, seek distance %s\n",
		tool, format_bytes((uint64_t)(mean_request_bytes(s) + 0.5), mean,
				   sizeof(mean)),
		(unsigned long long)s->seeks,
		format_bytes(s->seek_distance, distance, sizeof(distance)));
	if (r->opt.mode == MODE_PREFETCH)
		fprintf(stderr, "%s: %llu requests already cached, not "
			"prefetched\n", tool,
			(unsigned long long)s->already_resident);
	if (r->opt.timing && s->late_requests)
		fprintf(stderr, "%s: --timing: %llu requests started late, "
			"worst by %.1f ms\n", tool,
			(unsigned long long)s->late_requests,
			(double)s->worst_lateness_us / 1000.0);
	print_kinds_summary(r);
	throttle_print_summary(r);
	print_skipped_summary(r);
}
