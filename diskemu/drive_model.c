/* See drive_model.h and docs/diskemu.md. */
#include "drive_model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "size.h"

/* Steps of the numerical means (mean seek, mean 1/rate): enough for the
 * sqrt part's error to stay under 0.01%. */
#define MEAN_STEPS 20000

#define PROFILE_COLUMNS 12

/* Fills P from the columns of one profile line; -1 when one is bad. */
static int parse_columns(char **col, struct drive_profile *p)
{
	double *numbers[] = {&p->rpm, &p->capacity, &p->avg_seek_ms,
			     &p->track_to_track_ms, &p->full_stroke_ms,
			     &p->boundary_fraction, &p->outer_bps,
			     &p->inner_bps};
	uint64_t zones, readahead;
	char *end;

	if (strlen(col[0]) >= DRIVE_NAME_MAX)
		return -1;
	strcpy(p->name, col[0]);
	for (size_t i = 0; i < sizeof(numbers) / sizeof(*numbers); i++) {
		errno = 0;
		*numbers[i] = strtod(col[i + 1], &end);
		if (errno || *end || end == col[i + 1])
			return -1;
	}
	p->outer_bps *= 1e6;    /* the file has MB/s, as datasheets */
	p->inner_bps *= 1e6;
	if (parse_number(col[9], NULL, 1, INT_MAX, &zones) < 0)
		return -1;
	p->zones = (int)zones;
	p->overhead_ms = strtod(col[10], &end);
	if (*end || parse_number(col[11], &size_units, 0, UINT64_MAX,
				 &readahead) < 0)
		return -1;
	p->readahead = (double)readahead;
	return 0;
}

/* Splits LINE into at most MAX whitespace-separated columns. */
static int split(char *line, char **col, int max)
{
	int n = 0;

	for (char *tok = strtok(line, " \t\r\n"); tok && n < max;
	     tok = strtok(NULL, " \t\r\n"))
		col[n++] = tok;
	return n;
}

/* Calls FN on each profile line of FILE; stops when it returns non-zero.
 * Returns FN's value, 0 at the end, or -1 after an error line. */
static int for_each_profile(const char *file,
			    int (*fn)(char **col, int lineno, void *arg),
			    void *arg)
{
	FILE *f = fopen(file, "re");
	char line[1024];
	int lineno = 0, ret = 0, header = 1;

	if (!f) {
		errmsg(file, "cannot read the profiles: %s",
		       errmsg_strerror(errno));
		return -1;
	}
	while (!ret && fgets(line, sizeof(line), f)) {
		char *col[PROFILE_COLUMNS + 1];
		char *hash = strchr(line, '#');
		int n;

		lineno++;
		if (hash)
			*hash = '\0';
		n = split(line, col, PROFILE_COLUMNS + 1);
		if (n == 0)
			continue;
		if (header) {        /* the first non-comment line names columns */
			header = 0;
			continue;
		}
		if (n != PROFILE_COLUMNS) {
			errmsg(file, "line %d: %d columns, expected %d", lineno,
			       n, PROFILE_COLUMNS);
			ret = -1;
			break;
		}
		ret = fn(col, lineno, arg);
	}
	fclose(f);
	return ret;
}

struct load_arg {
	const char *file, *name;
	struct drive_profile *p;
};

static int load_one(char **col, int lineno, void *arg)
{
	struct load_arg *a = arg;

	if (strcmp(col[0], a->name) != 0)
		return 0;
	if (parse_columns(col, a->p) < 0) {
		errmsg(a->file, "line %d: a column is not a number", lineno);
		return -1;
	}
	return 1;
}

int drive_profile_load(const char *file, const char *name,
		       struct drive_profile *p)
{
	struct load_arg a = {file, name, p};
	int ret = for_each_profile(file, load_one, &a);

	if (ret == 0) {
		errmsg("--profile", "'%s': no such profile in %s (diskemu "
		       "--list-profiles names them)", name, file);
		return -1;
	}
	return ret < 0 ? -1 : 0;
}

static int print_one(char **col, int lineno, void *arg)
{
	(void)lineno;
	fprintf(arg, "%s\n", col[0]);
	return 0;
}

int drive_profile_list(const char *file, FILE *out)
{
	return for_each_profile(file, print_one, out);
}

/* The curve for a distance given as a fraction of the full stroke. */
static double seek_fraction_s(const struct drive_model *m, double f)
{
	const struct drive_profile *p = &m->p;
	double ms;

	if (f <= 0)
		return 0;
	if (f > 1)
		f = 1;
	if (f <= p->boundary_fraction)
		ms = p->track_to_track_ms + (m->boundary_ms - p->track_to_track_ms)
			* sqrt(f / p->boundary_fraction);
	else
		ms = m->boundary_ms + (p->full_stroke_ms - m->boundary_ms)
			* (f - p->boundary_fraction)
			/ (1 - p->boundary_fraction);
	return ms / 1e3;
}

double drive_seek_s(const struct drive_model *m, double distance)
{
	return seek_fraction_s(m, distance / m->p.capacity);
}

double drive_rate_bps(const struct drive_model *m, double offset)
{
	const struct drive_profile *p = &m->p;
	int zone = (int)(offset / p->capacity * p->zones);

	if (zone < 0)
		zone = 0;
	if (zone >= p->zones)
		zone = p->zones - 1;
	if (p->zones == 1)
		return p->outer_bps;
	return p->outer_bps + (p->inner_bps - p->outer_bps) * zone
		/ (p->zones - 1);
}

/* The distance between two random points of [0, S) has density
 * 2 (S - x) / S^2; the midpoint rule over it. */
double drive_mean_seek_s(const struct drive_model *m, double span)
{
	double sum = 0, step = span / MEAN_STEPS;

	for (int i = 0; i < MEAN_STEPS; i++) {
		double x = (i + 0.5) * step;

		sum += drive_seek_s(m, x) * 2 * (span - x) / (span * span) * step;
	}
	return sum;
}

/* Mean of 1 / rate over [0, SPAN): the mean transfer time of a byte. */
static double mean_inverse_rate(const struct drive_model *m, double span)
{
	double sum = 0;

	for (int i = 0; i < MEAN_STEPS; i++)
		sum += 1 / drive_rate_bps(m, (i + 0.5) * span / MEAN_STEPS);
	return sum / MEAN_STEPS;
}

double drive_random_iops(const struct drive_model *m, double span,
			 double length)
{
	double per_request = m->p.overhead_ms / 1e3
		+ drive_mean_seek_s(m, span) + m->rev_s / 2
		+ length * mean_inverse_rate(m, span);

	return 1 / per_request;
}

static int profile_ok(const struct drive_profile *p)
{
	return p->rpm > 0 && p->capacity > 0 && p->track_to_track_ms >= 0 &&
		p->avg_seek_ms > p->track_to_track_ms &&
		p->full_stroke_ms > p->avg_seek_ms &&
		p->boundary_fraction > 0 && p->boundary_fraction < 1 &&
		p->outer_bps > 0 && p->inner_bps > 0 && p->zones >= 1 &&
		p->overhead_ms >= 0 && p->readahead >= 0;
}

/* The mean seek is linear in the boundary time, so two evaluations solve
 * for the one that gives the datasheet's average. */
int drive_model_init(struct drive_model *m, const struct drive_profile *p)
{
	double at0, at1;

	if (!profile_ok(p)) {
		errmsg(p->name, "impossible figures (need avg seek between "
		       "track-to-track and full stroke, 0 < boundary < 1, "
		       "positive rates)");
		return -1;
	}
	m->p = *p;
	m->rev_s = 60.0 / p->rpm;
	m->boundary_ms = 0;
	at0 = drive_mean_seek_s(m, p->capacity) * 1e3;
	m->boundary_ms = 1;
	at1 = drive_mean_seek_s(m, p->capacity) * 1e3;
	m->boundary_ms = (p->avg_seek_ms - at0) / (at1 - at0);
	if (m->boundary_ms < p->track_to_track_ms ||
	    m->boundary_ms > p->full_stroke_ms) {
		errmsg(p->name, "no seek curve through these figures (boundary "
		       "time %.2f ms is outside track-to-track..full stroke)",
		       m->boundary_ms);
		return -1;
	}
	return 0;
}

static double frac(double x)
{
	return x - floor(x);
}

/* Data the read-ahead buffer holds or will hold once the stream reaches
 * it: from the last missed request's start, but no more than readahead
 * bytes back (the buffer's size), to readahead past the last request's
 * end. */
static int buffered(const struct drive_model *m, const struct drive_state *s,
		    double offset, double length)
{
	return s->started &&
		offset >= fmax(s->buffer_begin, s->stream_end - m->p.readahead) &&
		offset + length <= s->stream_end + m->p.readahead;
}

/* A read from the buffer: ready when the stream, moving at the media
 * rate since it passed stream_end, has read its last byte. */
static struct drive_timing serve_buffered(const struct drive_model *m,
					  struct drive_state *s, double start,
					  double offset, double length)
{
	double rate = drive_rate_bps(m, s->stream_end);
	double end = offset + length;
	double ready = s->stream_time + (end - s->stream_end) / rate;
	struct drive_timing t = {.start = start, .buffered = 1};

	t.done = fmax(start + m->p.overhead_ms / 1e3, ready);
	t.transfer_s = fmax(0, ready - start);
	if (end > s->stream_end) {
		s->stream_end = end;
		s->stream_time = ready;
		s->head = end;
	}
	return t;
}

/* A read the head must go to: seek, wait for the sector, transfer. */
static struct drive_timing serve_media(const struct drive_model *m,
				       struct drive_state *s, double start,
				       double offset, double length)
{
	double rate = drive_rate_bps(m, offset);
	double track = rate * m->rev_s;          /* bytes of one revolution */
	struct drive_timing t = {.start = start};
	double at;

	t.distance = s->started ? fabs(offset - s->head) : m->p.capacity / 3;
	t.seek_s = drive_seek_s(m, t.distance);
	at = start + m->p.overhead_ms / 1e3 + t.seek_s;
	t.rotation_s = frac(offset / track - at / m->rev_s) * m->rev_s;
	t.transfer_s = length / rate;
	t.done = at + t.rotation_s + t.transfer_s;
	s->started = 1;
	s->buffer_begin = offset;
	s->stream_end = offset + length;
	s->stream_time = t.done;
	s->head = offset + length;
	return t;
}

/* The command overhead runs from when the host sent the request. The
 * daemon sees it only after the emulator's own path (block layer, loop
 * worker, FUSE), so on an idle drive up to the overhead of the time since
 * the last completion counts as overhead already spent: the path stands
 * in for it instead of adding to it. A request that queued behind
 * another pays the whole overhead after it. */
struct drive_timing drive_serve(const struct drive_model *m,
				struct drive_state *s, double arrival,
				double offset, double length)
{
	double start = fmax(arrival - m->p.overhead_ms / 1e3, s->free_at);
	struct drive_timing t = buffered(m, s, offset, length)
		? serve_buffered(m, s, start, offset, length)
		: serve_media(m, s, start, offset, length);

	s->free_at = t.done;
	return t;
}
