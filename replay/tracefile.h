/* Reader for pagetrace trace format v1 (docs/trace-format.md).
 *
 * The reader is a pull parser: tracefile_next() hands back one record, one
 * malformed line (with its 1-based line number and a reason) or the end of
 * the file, so callers decide whether malformed lines are fatal. Header keys
 * are read from comment lines before the first record; the `# end:` trailer
 * is read wherever it appears (the last one wins).
 */
#ifndef PAGETRACE_TRACEFILE_H
#define PAGETRACE_TRACEFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TRACEFILE_VERSION 1
#define TRACEFILE_DEFAULT_PAGE_SIZE 4096

enum tracefile_status {
	TRACEFILE_RECORD,    /* *record holds a valid record */
	TRACEFILE_MALFORMED, /* line_no and reason say what was wrong */
	TRACEFILE_EOF,
	TRACEFILE_ERROR,     /* fatal: unknown version, bad header, I/O error */
};

/* Why a line was malformed. Offset problems get their own codes because
 * replay counts them apart from other malformed lines. */
enum tracefile_defect {
	TRACEFILE_DEFECT_NONE,
	TRACEFILE_DEFECT_FIELDS,     /* fewer than three fields */
	TRACEFILE_DEFECT_TIMESTAMP,  /* not an unsigned integer */
	TRACEFILE_DEFECT_ESCAPE,     /* backslash not followed by \ooo */
	TRACEFILE_DEFECT_OFFSET,     /* not an integer at all */
	TRACEFILE_DEFECT_NEGATIVE,   /* a minus sign and digits */
	TRACEFILE_DEFECT_UNALIGNED,  /* not a multiple of page-size */
	TRACEFILE_DEFECT_HUGE,       /* does not fit in 64 bits */
};

struct tracefile_trailer {
	int present;
	uint64_t pages, bytes, files, duration_us, lost;
};

struct tracefile_record {
	uint64_t timestamp_us;
	uint64_t offset;
	char *path;         /* unescaped bytes, NUL-terminated for convenience */
	size_t path_len;    /* may contain NUL bytes (from \000) */
	char **extra;       /* unescaped extra columns */
	size_t *extra_len;
	size_t n_extra;
	size_t line_no;
};

struct tracefile {
	FILE *stream;
	const char *name;          /* for messages */
	int version;
	uint64_t page_size;
	char **columns;            /* from the `columns` header key */
	size_t n_columns;
	struct tracefile_trailer trailer;
	size_t line_no;
	int seen_record;           /* header keys are read only before this */
	char *unsupported_version; /* set when TRACEFILE_ERROR was a version */
	char error[256];           /* reason for TRACEFILE_MALFORMED/ERROR */
	enum tracefile_defect defect;

	/* Buffers reused from line to line. */
	char *line;
	size_t line_cap;
	struct tracefile_record record;
	size_t extra_cap;
	void *fields;              /* struct field[], private to tracefile.c */
	size_t fields_cap;
};

/* Starts reading STREAM (not closed by tracefile_close). NAME is used in
 * messages. Returns 0, or -1 with errno set when out of memory. */
int tracefile_init(struct tracefile *tf, FILE *stream, const char *name);

/* Reads the next record or malformed line. The record stays valid until
 * the next call. On TRACEFILE_MALFORMED, tf->line_no, tf->defect and
 * tf->error describe the line; on TRACEFILE_ERROR, tf->error says why. */
enum tracefile_status tracefile_next(struct tracefile *tf,
				     const struct tracefile_record **record);

void tracefile_close(struct tracefile *tf);

/* True when a defect concerns the offset field (negative, unaligned,
 * huge or not a number). */
int tracefile_defect_is_offset(enum tracefile_defect defect);

/* Writes BYTES escaped as the trace format does (\ooo for space, tab,
 * newline, backslash, other control bytes and 0x7f; EXTRA lists further
 * bytes to escape, may be NULL). */
void tracefile_write_escaped(FILE *out, const char *bytes, size_t len,
			     const char *extra);

#endif
