/* The one size parser of the pagetrace C tools (the Python tools have the
 * same rules): decimal bytes with an optional K, M or G suffix (either
 * case), powers of 1024: "4096", "64k", "1M", "2G"; and the plain
 * unsigned numbers of the trace and pack formats. */
#ifndef PAGETRACE_SIZE_H
#define PAGETRACE_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Returns 0 and sets *BYTES, or -1 when TEXT is not a size or does not
 * fit in 64 bits. */
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
