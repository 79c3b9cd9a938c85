// SPDX-License-Identifier: GPL-2.0
/*
 * cachestat --openmetrics: the totals a scrape is given, served by
 * http_server.c: hits, misses and dirties as counters, the read hit ratio
 * since the start as a gauge, and the events lost, by reason, as a counter
 * of their own; then the same per cgroup2 cgroup (families
 * pagetrace_cache_cgroup_*, labelled by cgroup_id, the cgroup's path and
 * its container's name where they are known), which add up to the totals
 * (a cgroup map full is a lost-events reason). As OpenMetrics 1.0 text
 * ("application/openmetrics-text; version=1.0.0"), or as Prometheus' text
 * format 0.0.4 to a client whose Accept header prefers it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "cache.skel.h"
#include "clock.h"
#include "errmsg.h"
#include "http_server.h"
#include "openmetrics.h"
#include "cache_load.h"
#include "cgroup_names.h"

#define OM_PRUNE_NS (60 * 1000000000ull)	/* gone cgroups dropped this often */

struct openmetrics {
	struct http_server *http;
	struct cache_bpf *skel;
	const char *cgroup;
	uint64_t next_prune_ns;
};

/* ------------------------------------------------------------------ */
/* The exposition                                                     */

struct exposition {
	FILE *out;
	bool om;	/* OpenMetrics; else Prometheus' text 0.0.4 */
};

/* The length of the valid UTF-8 sequence at @s (NUL-terminated), 0 if none. */
static int utf8_sequence(const unsigned char *s)
{
	int n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 :
		s[0] >= 0xe0 && s[0] < 0xf0 ? 3 : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;

	for (int i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	/* overlong forms, UTF-16 surrogates, above U+10FFFF */
	if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
	    (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
		return 0;
	return n;
}

/* A label value, escaped as both formats ask (\\, \", \n); bytes that are
 * not UTF-8 (a cgroup's name may hold any) become U+FFFD. */
static void label_value(FILE *out, const char *text)
{
	const unsigned char *s = (const unsigned char *)text;

	while (*s) {
		int n = utf8_sequence(s);

		if (!n) {
			fputs("\xef\xbf\xbd", out);
			s++;
		} else if (*s == '\\' || *s == '"') {
			fprintf(out, "\\%c", *s++);
		} else if (*s == '\n') {
			fputs("\\n", out);
			s++;
		} else {
			fwrite(s, 1, n, out);
			s += n;
		}
	}
}

/* A family's descriptors: OpenMetrics names a counter's family without
 * _total and may give a unit (its name then ends in it); the text format
 * names the sample. */
static void family(struct exposition *x, const char *name, const char *type, const char *unit,
		   const char *help)
{
	const char *total = !x->om && !strcmp(type, "counter") ? "_total" : "";

	fprintf(x->out, "# TYPE pagetrace_cache_%s%s %s\n", name, total, type);
	if (unit && x->om)
		fprintf(x->out, "# UNIT pagetrace_cache_%s %s\n", name, unit);
	fprintf(x->out, "# HELP pagetrace_cache_%s%s %s\n", name, total, help);
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

/* hits / (hits + misses) as a sample's value: NaN before any access. */
static void ratio_value(char *value, size_t size, __u64 hits, __u64 misses)
{
	if (hits + misses)
		snprintf(value, size, "%.6f", read_hit_ratio(hits, misses));
	else
		snprintf(value, size, "NaN");
}

static void metrics(struct exposition *x, const __u64 *t, const char *cgroup)
{
	char value[32], reason[64];

	family(x, "hits", "counter", NULL, "Accesses to pages that were in the page cache.");
	counter(x->out, "hits_total", cgroup, NULL, t[CACHE_HITS]);
	family(x, "misses", "counter", NULL, "First accesses to pages read from storage.");
	counter(x->out, "misses_total", cgroup, NULL, t[CACHE_MISSES]);
	family(x, "dirties", "counter", NULL, "Pages that turned dirty (writes).");
	counter(x->out, "dirties_total", cgroup, NULL, t[CACHE_DIRTIES]);
	family(x, "read_hit_ratio", "gauge", "ratio", "hits / (hits + misses) since cachestat "
	       "started; NaN before any access.");
	ratio_value(value, sizeof(value), t[CACHE_HITS], t[CACHE_MISSES]);
	sample(x->out, "read_hit_ratio", cgroup, NULL, value);
	family(x, "lost_events", "counter", NULL, "Events not counted, by reason: "
	       "the other counters miss that many.");
	for (int slot = CACHE_LOST_PAGE_STATE; slot < NR_CACHE_COUNTERS; slot++) {
		snprintf(reason, sizeof(reason), "reason=\"%s\"", lost_reasons[slot]);
		counter(x->out, "lost_events_total", cgroup, reason, t[slot]);
	}
}

/* One cgroup's sample: pagetrace_cache_cgroup_NAME{cgroup_id=,cgroup=,container=} VALUE;
 * @known NULL for a cgroup gone before it was named. */
static void cgroup_sample(FILE *out, const char *name, __u64 id, const struct cgroup_name *known,
			  const char *value)
{
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

/*
 * A cgroup's samples wait until its name is known: a container's name is
 * asked without blocking the scrape, and a series whose labels changed
 * once it was known would be a second series. Until then (a runtime's
 * answer, at most CONTAINER_ASK_S) the cgroup families add up to less than
 * the totals. Moves the rows to show to the front and sets @known[i] to
 * row i's name (NULL: gone unnamed, shown by id); how many. The names are
 * looked up after every row was asked for, which may have grown the table.
 */
static int named_rows(struct cgroup_counts *rows, int n, const struct cgroup_name **known)
{
	int shown = 0;

	for (int i = 0; i < n; i++)
		if (name_cgroup_nowait(rows[i].id))
			rows[shown++] = rows[i];
	for (int i = 0; i < shown; i++)
		known[i] = cgroup_name_known(rows[i].id);
	return shown;
}

static void cgroup_metrics(struct exposition *x, const struct cgroup_counts *rows,
			   const struct cgroup_name *const *known, int n)
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
		family(x, name, "counter", NULL, counters[c].help);
		snprintf(name, sizeof(name), "%s_total", counters[c].name);
		for (int i = 0; i < n; i++) {
			const char *k = (const char *)&rows[i].counts;

			snprintf(value, sizeof(value), "%llu",
				 *(const unsigned long long *)(k + counters[c].field));
			cgroup_sample(x->out, name, rows[i].id, known[i], value);
		}
	}
	family(x, "cgroup_read_hit_ratio", "gauge", "ratio", "hits / (hits + misses) since "
	       "cachestat started, by cgroup; NaN before any access.");
	for (int i = 0; i < n; i++) {
		const struct cache_counts *k = &rows[i].counts;

		ratio_value(value, sizeof(value), k->hits, k->misses);
		cgroup_sample(x->out, "read_hit_ratio", rows[i].id, known[i], value);
	}
}

/* The body of a scrape into *@body (malloc'd): 0, or -1 if the counters
 * could not be read (said on stderr). */
static int exposition(void *ctx, enum http_format format, char **body, size_t *size)
{
	struct openmetrics *om = ctx;
	__u64 totals[NR_CACHE_COUNTERS];
	struct cgroup_counts *rows;
	const struct cgroup_name **known;
	struct exposition x = { .om = format == HTTP_FORMAT_OPENMETRICS };
	int nrows;

	*body = NULL;
	if (cache_read_totals(om->skel, totals) || (nrows = cache_read_cgroups(om->skel, &rows)) < 0)
		return -1;
	known = calloc(nrows + 1, sizeof(*known));
	x.out = known ? open_memstream(body, size) : NULL;
	if (!x.out) {
		free(known);
		free(rows);
		return -1;
	}
	metrics(&x, totals, om->cgroup);
	nrows = named_rows(rows, nrows, known);
	cgroup_metrics(&x, rows, known, nrows);
	if (x.om)
		fputs("# EOF\n", x.out);
	free(known);
	free(rows);
	if (fclose(x.out)) {
		free(*body);
		*body = NULL;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Listening                                                          */

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

int openmetrics_listen(const char *address, struct openmetrics **server)
{
	struct sockaddr_storage sa;
	char shown[INET6_ADDRSTRLEN + 16];
	struct openmetrics *om;
	socklen_t len;
	int fd, one = 1;

	if (parse_address(address, &sa, &len, shown, sizeof(shown)))
		return errmsg("--openmetrics", "'%s' is not ADDR:PORT (a numeric address, "
			      "[IPv6], or :PORT for 127.0.0.1)", address), -2;
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return errmsg(shown, "%s", errmsg_strerror(errno)), -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, len) || listen(fd, SOMAXCONN)) {
		errmsg(shown, "%s", errmsg_strerror(errno));
		close(fd);
		return -1;
	}
	om = calloc(1, sizeof(*om));
	if (!om) {
		close(fd);
		return errmsg(shown, "out of memory"), -1;
	}
	om->http = http_server_new(fd, exposition, om);
	if (!om->http) {
		close(fd);
		free(om);
		return errmsg(shown, "out of memory"), -1;
	}
	*server = om;
	return 0;
}

/*
 * The cgroups map keeps a cgroup's counts from its first access on; one
 * that is gone has no task left to count, and its series would stay
 * forever while cgroups come and go. Its entry and its name are dropped:
 * its series end (Prometheus marks them stale), the totals keep its
 * counts. The keys are taken before the walk of the hierarchy: a key then
 * absent from it was a cgroup gone (ids are never reused), not one made
 * after the walk.
 */
static void prune_gone_cgroups(struct openmetrics *om)
{
	int fd = bpf_map__fd(om->skel->maps.cgroups);
	__u64 key, *prev = NULL, *keys = NULL, *live;
	size_t n = 0, cap = 0;
	long nlive;

	while (!bpf_map_get_next_key(fd, prev, &key)) {
		if (n == cap) {
			__u64 *grown = reallocarray(keys, cap ? 2 * cap : 64, sizeof(*keys));

			if (!grown)
				break;
			keys = grown;
			cap = cap ? 2 * cap : 64;
		}
		keys[n++] = key;
		prev = &keys[n - 1];
	}
	nlive = cgroup_live_ids(&live);
	if (nlive >= 0) {
		for (size_t i = 0; i < n; i++)
			if (!cgroup_id_in(live, nlive, keys[i]))
				bpf_map_delete_elem(fd, &keys[i]);
		forget_gone_cgroups();
	}
	free(live);
	free(keys);
}

void openmetrics_serve(struct openmetrics *om, uint64_t until_ns, struct cache_bpf *skel,
		       const char *cgroup, volatile sig_atomic_t *stop)
{
	om->skel = skel;
	om->cgroup = cgroup;
	if (monotonic_ns() >= om->next_prune_ns) {
		if (om->next_prune_ns)
			prune_gone_cgroups(om);
		/* The resident size follows what is in use: a scrape's body, as
		 * large as the cgroups it names, freed inside the heap stays
		 * resident until trimmed. */
		malloc_trim(0);
		om->next_prune_ns = monotonic_ns() + OM_PRUNE_NS;
	}
	http_server_serve(om->http, until_ns, stop);
}

void openmetrics_close(struct openmetrics *om)
{
	if (!om)
		return;
	http_server_free(om->http);
	cgroup_names_close();
	free(om);
}

