/* The spinning-disk model of diskemu: one head serving requests in arrival
 * order, a seek curve (Ruemmler and Wilkes, "An introduction to disk drive
 * modeling", IEEE Computer, 1994: a constant plus sqrt(distance) for short
 * seeks, linear for long ones, as DiskSim's hpl curve), rotational
 * position from the clock, a transfer rate that falls zone by zone from
 * the outer edge to the inner one, and a read-ahead buffer that keeps a
 * sequential stream at the media rate. docs/diskemu.md describes it. */
#ifndef PAGETRACE_DRIVE_MODEL_H
#define PAGETRACE_DRIVE_MODEL_H

#include <stdint.h>
#include <stdio.h>

#define DRIVE_NAME_MAX 32

/* One line of diskemu/profiles.tsv (datasheet figures). */
struct drive_profile {
	char name[DRIVE_NAME_MAX];
	double rpm;
	double capacity;           /* bytes */
	double avg_seek_ms;        /* mean over random pairs of positions */
	double track_to_track_ms;
	double full_stroke_ms;
	double boundary_fraction;  /* where the sqrt part meets the linear one */
	double outer_bps, inner_bps; /* media rate, bytes/s, zone 0 and last */
	int zones;
	double overhead_ms;        /* command overhead of every request */
	double readahead;          /* bytes the drive reads on past a request */
};

/* A profile made usable: the seek time at the boundary, solved so that the
 * mean seek over random pairs is avg_seek_ms. */
struct drive_model {
	struct drive_profile p;
	double boundary_ms;
	double rev_s;              /* one revolution, seconds */
};

/* Where the head is and what the read-ahead buffer holds. */
struct drive_state {
	int started;
	double head;               /* byte offset under the head */
	double buffer_begin;       /* the buffer holds [buffer_begin, */
	double stream_end;         /*  stream_end + readahead) */
	double stream_time;        /* when the stream passed stream_end */
	double free_at;            /* when the head finishes its last request */
};

/* What one request cost, for --log and the tests. */
struct drive_timing {
	double start, done;        /* seconds, the model's clock */
	double distance;           /* bytes the head moved (0 on a hit) */
	double seek_s, rotation_s, transfer_s;
	int buffered;              /* served from the read-ahead buffer */
};

/* Reads the profile NAME from FILE (whitespace-separated columns, header
 * line, '#' comments). Returns 0, or -1 after an error line. */
int drive_profile_load(const char *file, const char *name,
		       struct drive_profile *p);
/* Prints the names in FILE, one a line, to OUT; -1 when unreadable. */
int drive_profile_list(const char *file, FILE *out);
/* Checks P and derives the model; -1 after an error line. */
int drive_model_init(struct drive_model *m, const struct drive_profile *p);

/* Seek time in seconds for a move of DISTANCE bytes (0 for none). */
double drive_seek_s(const struct drive_model *m, double distance);
/* Media rate at byte OFFSET (its zone's). */
double drive_rate_bps(const struct drive_model *m, double offset);
/* Mean seek over random pairs of positions in [0, SPAN), seconds. */
double drive_mean_seek_s(const struct drive_model *m, double span);
/* Random reads of LENGTH bytes over [0, SPAN) at queue depth 1. */
double drive_random_iops(const struct drive_model *m, double span,
			 double length);

/* Serves a read of LENGTH bytes at OFFSET that arrives at time ARRIVAL
 * (seconds): returns its timing and advances S. */
struct drive_timing drive_serve(const struct drive_model *m,
				struct drive_state *s, double arrival,
				double offset, double length);

#endif
