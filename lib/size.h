/* The one size parser of the pagetrace C tools (the Python tools have the
 * same rules): decimal bytes with an optional K, M or G suffix (either
 * case), powers of 1024: "4096", "64k", "1M", "2G". */
#ifndef PAGETRACE_SIZE_H
#define PAGETRACE_SIZE_H

#include <stdint.h>

/* Returns 0 and sets *BYTES, or -1 when TEXT is not a size or does not
 * fit in 64 bits. */
int parse_size(const char *text, uint64_t *bytes);

#endif
