/* Reader for pagetrace trace format versions 1 and 2
 * (docs/trace-format.md, "Readers").
 *
 * The reader is a pull parser: tracefile_next() hands back one record, one
 * malformed line (with its 1-based line number and a reason) or the end of
 * the file, so callers decide whether malformed lines are fatal. The whole
 * input is read before the first record is handed out, because some
 * defects refuse the whole file (empty, a NUL byte anywhere, a bad header):
 * a caller never acts on records of a file it must refuse. Header keys are
 * read from the comment lines before the first record; the `# end:`
 * trailer is read wherever it appears (the last one wins).
 */
#ifndef PAGETRACE_TRACEFILE_H
#define PAGETRACE_TRACEFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TRACEFILE_VERSION_MAX 2
#define TRACEFILE_DEFAULT_PAGE_SIZE 4096

enum tracefile_status {
	TRACEFILE_RECORD,    /* *record holds a valid record */
	TRACEFILE_MALFORMED, /* line_no and reason say what was wrong */
	TRACEFILE_EOF,
	TRACEFILE_ERROR,     /* the whole file is refused, or I/O failed */
};

/* The `kind` column of version 2; every version 1 record is a read. */
enum tracefile_kind {
	TRACEFILE_KIND_READ,    /* read from storage */
	TRACEFILE_KIND_ACCESS,  /* first access while tracing */
	TRACEFILE_KIND_MAP,     /* mapped by fault-around, possibly used */
	TRACEFILE_KIND_COUNT
};

/* Why a line was malformed, in the order the checks run (the first
 * failing one wins). Offset problems are told apart because replay counts
 * them apart from other malformed lines. Each "does not fit" follows its
 * "not an unsigned integer" (tracefile.c relies on it). */
enum tracefile_defect {
	TRACEFILE_DEFECT_NONE,
	TRACEFILE_DEFECT_FIELDS,          /* fewer than three fields */
	TRACEFILE_DEFECT_NO_KIND,         /* v2: exactly three fields */
	TRACEFILE_DEFECT_TIMESTAMP,       /* not an unsigned integer */
	TRACEFILE_DEFECT_TIMESTAMP_HUGE,  /* does not fit in 64 bits */
	TRACEFILE_DEFECT_OFFSET,          /* not an unsigned integer */
	TRACEFILE_DEFECT_OFFSET_HUGE,     /* does not fit in 64 bits */
	TRACEFILE_DEFECT_UNALIGNED,       /* not a multiple of page-size */
	TRACEFILE_DEFECT_PATH_ESCAPE,     /* backslash not followed by \ooo */
	TRACEFILE_DEFECT_EXTRA_ESCAPE,
	TRACEFILE_DEFECT_KIND,            /* not read, access or map */
	TRACEFILE_DEFECT_KIND_UNDECLARED, /* absent from the records header */
	TRACEFILE_DEFECT_CRLF,            /* line ends in \r */
};

struct tracefile_trailer {
	int present;
	uint64_t pages, bytes, files, duration_us, lost;
	uint64_t accessed, mapped;    /* version 2 */
};

struct tracefile_record {
	uint64_t timestamp_us;
	uint64_t offset;
	enum tracefile_kind kind;
	char *path;         /* unescaped bytes, NUL-terminated for convenience */
	size_t path_len;    /* may contain NUL bytes (from \000) */
	char **extra;       /* unescaped columns after offset: in version 2 */
	size_t *extra_len;  /* the first is the kind, as columns[3] says */
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
	unsigned kinds_declared;   /* bit per kind, from `records` (v2) */
	struct tracefile_trailer trailer;
	size_t line_no;
	char *unsupported_version; /* set when TRACEFILE_ERROR was a version */
	char error[256];           /* reason for TRACEFILE_MALFORMED/ERROR */
	enum tracefile_defect defect;

	/* The whole input, read on the first tracefile_next(). */
	char *data;
	size_t size, pos;
	int loaded;
	int failed;                /* refused: every later call says so */

	/* Buffers reused from line to line. */
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

/* True when a defect concerns the offset field (not a number, too large,
 * unaligned). */
int tracefile_defect_is_offset(enum tracefile_defect defect);

/* A metadata record: its path is a device node, /dev/... (docs/trace-format.md,
 * "Metadata records"), its offset a byte offset on the device. */
int tracefile_is_metadata(const char *path, size_t len);

/* "read", "access", "map". */
const char *tracefile_kind_name(enum tracefile_kind kind);

#endif
