/* The C reader of the prefetch pack format, version 1 (docs/pack-format.md):
 * what `launch` prefetches. The Python reader is
 * analysis/pagetrace/core/packfile.py; both pass samples/pack/
 * (launch/packfile-dump prints what this one makes of a sample). */
#ifndef PAGETRACE_PACKFILE_H
#define PAGETRACE_PACKFILE_H

#include <stddef.h>
#include <stdint.h>

#define PACKFILE_VERSION 1
/* The content check covers at most this many bytes at a file's start. */
#define PACKFILE_HEAD_BYTES 4096

struct pack_file {
	char *path;              /* unescaped, NUL-terminated */
	size_t path_len;
	unsigned major, minor;   /* st_dev when recorded */
	uint64_t ino, size, mtime_ns;
	uint32_t head_crc32;
};

struct pack_range {
	size_t file;             /* index into pack.files */
	uint64_t page, pages, ts_us;
};

struct pack_request_us {
	unsigned major, minor;
	uint64_t us;
};

struct pack {
	uint64_t page_size, created, runs;
	char *command;           /* unescaped */
	size_t command_len;
	char *read_ahead_kb;     /* a number, "unchanged" or "unknown" */
	struct pack_file *files;
	size_t n_files, files_cap;
	struct pack_range *ranges;
	size_t n_ranges, ranges_cap;
	struct pack_request_us *request_us;
	size_t n_request_us, request_us_cap;
	char *data;              /* the file's bytes; the strings point here */
};

enum packfile_status {
	PACKFILE_OK = 0,
	PACKFILE_REFUSED,        /* the reason says why */
	PACKFILE_VERSION_UNKNOWN,
	PACKFILE_UNREADABLE,     /* errno-like reason: the file could not be read */
};

/* Reads and checks the pack at PATH into PACK. On anything but
 * PACKFILE_OK, WHY (WHY_LEN bytes) holds the reason, the same words as the
 * Python reader's, and PACK holds nothing to free. */
enum packfile_status packfile_read(const char *path, struct pack *pack,
				   char *why, size_t why_len);
void packfile_free(struct pack *pack);

/* zlib's CRC-32 (ISO-HDLC), continued from CRC (0 to start). */
uint32_t packfile_crc32(uint32_t crc, const void *bytes, size_t len);

#endif
