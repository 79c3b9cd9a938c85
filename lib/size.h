/* The one number parser of the C tools, and their byte counts for people.
 *
 * Whole numbers of options and tables, read strictly: all of the text, a
 * range, the units a kind of number accepts. Sizes, whose rules the Python
 * tools share: decimal bytes with an optional K, M or G suffix (either
 * case), powers of 1024: "4096", "64k", "1M", "2G". The plain unsigned
 * numbers of the trace and pack formats. */
#ifndef PAGETRACE_SIZE_H
#define PAGETRACE_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* A unit a number may end with: SUFFIX (matched exactly; "" for the bare
 * number) multiplies it by SCALE. */
struct number_unit {
	const char *suffix;
	uint64_t scale;
};

/* The units of one kind of number, and the kind's name for messages. */
struct number_units {
	const char *what;               /* "a size (bytes, K, M or G)" */
	struct number_unit unit[8];     /* up to a NULL suffix */
};

/* Sizes: bytes, or K, M, G (either case), powers of 1024. */
extern const struct number_units size_units;

enum { NUMBER_SYNTAX = -1, NUMBER_RANGE = -2 };

/* Reads all of TEXT as a number: decimal digits (no sign, blank or "0x")
 * and, with UNITS, one of their suffixes, the number multiplied by its
 * scale (a bare number by the "" unit's, else 1); then from MIN to MAX.
 * Returns 0 and sets *VALUE; NUMBER_SYNTAX when TEXT is no such number,
 * NUMBER_RANGE when its value lies outside (or past 64 bits). */
int parse_number(const char *text, const struct number_units *units,
		 uint64_t min, uint64_t max, uint64_t *value);
/* A size (size_units, any value); 0, or -1 when TEXT is none. */
int parse_size(const char *text, uint64_t *bytes);
/* The trace and pack formats' numbers: the LEN bytes at S, ASCII digits
 * only, as an unsigned 64-bit integer. Returns 0, -1 when they are not
 * digits only (or none), -2 when the number does not fit. */
int parse_u64(const char *s, size_t len, uint64_t *value);
/* BYTES for a person to read: "512 bytes", "48.4 KiB", "3.7 MiB",
 * "1842.1 GiB" (powers of 1024, one decimal, never more than GiB so that
 * figures of one run compare at a glance). Writes at most LEN bytes to BUF
 * and returns BUF. */
const char *format_bytes(uint64_t bytes, char *buf, size_t len);

#endif
