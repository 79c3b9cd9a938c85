// SPDX-License-Identifier: GPL-2.0
/*
 * cachestat --openmetrics: a minimal HTTP/1.0 server (one request per
 * connection, answered in turn from the interval loop's thread) that gives
 * the totals as OpenMetrics text (OpenMetrics 1.0, "application/openmetrics-
 * text; version=1.0.0"): hits, misses and dirties as counters, the read hit
 * ratio since the start as a gauge, and the events lost, by reason, as a
 * counter of their own; then the same per cgroup2 cgroup (families
 * pagetrace_cache_cgroup_*, labelled by cgroup_id, the cgroup's path and
 * its container's name where they are known), which add up to the totals
 * (a cgroup map full is a lost-events reason). Any path but "/" and
 * "/metrics" is 404.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "errmsg.h"
#include "openmetrics.h"
#include "cache_load.h"
#include "container.h"

/* ADDR:PORT into @sa; the canonical "ADDR:PORT" in @shown. */
static int parse_address(const char *text, struct sockaddr_storage *sa, socklen_t *len,
			 char *shown, size_t size)
{
	const char *colon = strrchr(text, ':');
	char host[INET6_ADDRSTRLEN + 2] = "127.0.0.1", *end;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
	struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
	unsigned long port;
	size_t n;

	if (!colon)
		return -1;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port == 0 || port > 65535)
		return -1;
	n = colon - text;
	if (n >= sizeof(host))
		return -1;
	if (n) {
		memcpy(host, text, n);
		host[n] = '\0';
	}
	memset(sa, 0, sizeof(*sa));
	if (host[0] == '[' && host[n - 1] == ']') {
		host[n - 1] = '\0';
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(port);
		*len = sizeof(*v6);
		snprintf(shown, size, "[%s]:%lu", host + 1, port);
		return inet_pton(AF_INET6, host + 1, &v6->sin6_addr) == 1 ? 0 : -1;
	}
	v4->sin_family = AF_INET;
	v4->sin_port = htons(port);
	*len = sizeof(*v4);
	snprintf(shown, size, "%s:%lu", host, port);
	return inet_pton(AF_INET, host, &v4->sin_addr) == 1 ? 0 : -1;
}

int openmetrics_listen(const char *address)
{
	struct sockaddr_storage sa;
	char shown[INET6_ADDRSTRLEN + 16];
	socklen_t len;
	int fd, one = 1;

	if (parse_address(address, &sa, &len, shown, sizeof(shown)))
		return errmsg("--openmetrics", "'%s' is not ADDR:PORT (a numeric address, "
			      "[IPv6], or :PORT for 127.0.0.1)", address), -2;
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return errmsg(shown, "%s", errmsg_strerror(errno)), -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, len) || listen(fd, 16)) {
		errmsg(shown, "%s", errmsg_strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* A label value, escaped as OpenMetrics asks (\\, \", \n). */
static void label_value(FILE *out, const char *text)
{
	for (; *text; text++) {
		if (*text == '\\' || *text == '"')
			fprintf(out, "\\%c", *text);
		else if (*text == '\n')
			fputs("\\n", out);
		else
			putc(*text, out);
	}
}

static void family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# TYPE pagetrace_cache_%s %s\n# HELP pagetrace_cache_%s %s\n", name, type,
		name, help);
}

/* One sample: NAME{cgroup="...",EXTRA} VALUE. */
static void sample(FILE *out, const char *name, const char *cgroup, const char *extra,
		   const char *value)
{
	const char *sep = "{";

	fprintf(out, "pagetrace_cache_%s", name);
	if (cgroup) {
		fputs("{cgroup=\"", out);
		label_value(out, cgroup);
		putc('"', out);
		sep = ",";
	}
	if (extra)
		fprintf(out, "%s%s", sep, extra);
	fprintf(out, "%s %s\n", cgroup || extra ? "}" : "", value);
}

static void counter(FILE *out, const char *name, const char *cgroup, const char *extra, __u64 n)
{
	char value[32];

	snprintf(value, sizeof(value), "%llu", (unsigned long long)n);
	sample(out, name, cgroup, extra, value);
}

static const char *const lost_reasons[NR_CACHE_COUNTERS] = {
	[CACHE_LOST_PAGE_STATE] = "page_state_map_full",
	[CACHE_LOST_LONG_RANGE] = "range_too_long",
	[CACHE_LOST_LONG_BIO] = "bio_too_long",
	[CACHE_LOST_TASKS] = "untracked_child",
	[CACHE_LOST_PATH] = "name",
	[CACHE_LOST_PROCESS] = "process_map_full",
	[CACHE_LOST_FILE] = "file_map_full",
	[CACHE_LOST_FAULT] = "fault_unresolved",
	[CACHE_LOST_CGROUP] = "cgroup_map_full",
};

static void metrics(FILE *out, const __u64 *t, const char *cgroup)
{
	__u64 reads = t[CACHE_HITS] + t[CACHE_MISSES];
	char value[32], reason[64];

	family(out, "hits", "counter", "Accesses to pages that were in the page cache.");
	counter(out, "hits_total", cgroup, NULL, t[CACHE_HITS]);
	family(out, "misses", "counter", "First accesses to pages read from storage.");
	counter(out, "misses_total", cgroup, NULL, t[CACHE_MISSES]);
	family(out, "dirties", "counter", "Pages that turned dirty (writes).");
	counter(out, "dirties_total", cgroup, NULL, t[CACHE_DIRTIES]);
	family(out, "read_hit_ratio", "gauge", "hits / (hits + misses) since cachestat started; "
	       "NaN before any access.");
	if (reads)
		snprintf(value, sizeof(value), "%.6f", (double)t[CACHE_HITS] / (double)reads);
	else
		snprintf(value, sizeof(value), "NaN");
	sample(out, "read_hit_ratio", cgroup, NULL, value);
	family(out, "lost_events", "counter", "Events not counted, by reason: "
	       "the other counters miss that many.");
	for (int slot = CACHE_LOST_PAGE_STATE; slot < NR_CACHE_COUNTERS; slot++) {
		snprintf(reason, sizeof(reason), "reason=\"%s\"", lost_reasons[slot]);
		counter(out, "lost_events_total", cgroup, reason, t[slot]);
	}
}

/* One cgroup's sample: pagetrace_cache_cgroup_NAME{cgroup_id=,cgroup=,container=} VALUE. */
static void cgroup_sample(FILE *out, const char *name, __u64 id, const char *value)
{
	const struct cgroup_name *known = name_cgroup(id, NULL);

	fprintf(out, "pagetrace_cache_cgroup_%s{cgroup_id=\"%llu\"", name, (unsigned long long)id);
	if (known && known->path[0]) {
		fputs(",cgroup=\"", out);
		label_value(out, known->path);
		putc('"', out);
	}
	if (known && known->container[0]) {
		fputs(",container=\"", out);
		label_value(out, known->container);
		putc('"', out);
	}
	fprintf(out, "} %s\n", value);
}

static void cgroup_metrics(FILE *out, const struct cgroup_counts *rows, int n)
{
	static const struct { const char *name, *help; size_t field; } counters[] = {
		{ "hits", "Accesses to pages that were in the page cache, by cgroup.",
		  offsetof(struct cache_counts, hits) },
		{ "misses", "First accesses to pages read from storage, by cgroup.",
		  offsetof(struct cache_counts, misses) },
		{ "dirties", "Pages that turned dirty (writes), by cgroup.",
		  offsetof(struct cache_counts, dirties) },
	};
	char name[32], value[32];

	for (size_t c = 0; c < sizeof(counters) / sizeof(*counters); c++) {
		snprintf(name, sizeof(name), "cgroup_%s", counters[c].name);
		family(out, name, "counter", counters[c].help);
		snprintf(name, sizeof(name), "%s_total", counters[c].name);
		for (int i = 0; i < n; i++) {
			const char *k = (const char *)&rows[i].counts;

			snprintf(value, sizeof(value), "%llu",
				 *(const unsigned long long *)(k + counters[c].field));
			cgroup_sample(out, name, rows[i].id, value);
		}
	}
	family(out, "cgroup_read_hit_ratio", "gauge", "hits / (hits + misses) since cachestat "
	       "started, by cgroup; NaN before any access.");
	for (int i = 0; i < n; i++) {
		const struct cache_counts *k = &rows[i].counts;

		if (k->hits + k->misses)
			snprintf(value, sizeof(value), "%.6f", read_hit_ratio(k->hits, k->misses));
		else
			snprintf(value, sizeof(value), "NaN");
		cgroup_sample(out, "read_hit_ratio", rows[i].id, value);
	}
}

static bool wants_metrics(const char *request)
{
	return !strncmp(request, "GET / ", 6) || !strncmp(request, "GET /metrics ", 13) ||
	       !strncmp(request, "GET /metrics?", 13);
}

/* One connection: read the request line, answer, close. */
static void answer(int client, struct cache_bpf *skel, const char *cgroup)
{
	__u64 totals[NR_CACHE_COUNTERS];
	struct cgroup_counts *rows;
	int nrows;
	struct timeval timeout = { .tv_sec = 2 };
	char request[2048], *body = NULL;
	size_t body_size = 0, used = 0;
	ssize_t n;
	FILE *out;

	setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
	setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
	while (used + 1 < sizeof(request) && (n = read(client, request + used,
						       sizeof(request) - used - 1)) > 0) {
		used += n;
		request[used] = '\0';
		if (strstr(request, "\r\n\r\n") || strstr(request, "\n\n"))
			break;
	}
	request[used] = '\0';
	out = open_memstream(&body, &body_size);
	if (!out)
		return;
	if (wants_metrics(request) && !cache_read_totals(skel, totals) &&
	    (nrows = cache_read_cgroups(skel, &rows)) >= 0) {
		metrics(out, totals, cgroup);
		cgroup_metrics(out, rows, nrows);
		fputs("# EOF\n", out);
		free(rows);
	}
	fclose(out);
	dprintf(client, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		"Connection: close\r\n\r\n", body_size ? "200 OK" : "404 Not Found",
		body_size ? "application/openmetrics-text; version=1.0.0; charset=utf-8" :
		"text/plain", body_size);
	/* A scraper that went away gets nothing more: the write's result is moot. */
	if (body_size)
		(void)!write(client, body, body_size);
	free(body);
}

void openmetrics_serve(int fd, int ms, struct cache_bpf *skel, const char *cgroup)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int client;

	if (poll(&p, 1, ms) <= 0)
		return;
	while ((client = accept4(fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		answer(client, skel, cgroup);
		close(client);
	}
}
