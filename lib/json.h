/* JSON string output: the one JSON string writer of the C tools (replay,
 * tracefile-dump, launch, cachetop). */
#ifndef PAGETRACE_JSON_H
#define PAGETRACE_JSON_H

#include <stddef.h>
#include <stdio.h>

/* Writes BYTES as a JSON string. Valid UTF-8 passes through; a byte that
 * is not part of valid UTF-8 becomes \udcXX, Python's surrogateescape, so
 * that json.loads() gives the str the Python reader makes of the same
 * bytes. */
void json_string(FILE *out, const char *bytes, size_t len);
/* The same for a NUL-terminated TEXT. */
void json_puts(FILE *out, const char *text);
/* TEXT as a JSON string, or null when TEXT is NULL. */
void json_puts_or_null(FILE *out, const char *text);

#endif
