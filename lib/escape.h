/* The one escaper of the C tools: the trace format's path escaping
 * (docs/trace-format.md, "Path escaping"), and undoing the octal escapes
 * that /proc/self/mountinfo writes. */
#ifndef PAGETRACE_ESCAPE_H
#define PAGETRACE_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* Writes LEN BYTES escaped as the trace format does (\ooo for space, tab,
 * newline, backslash, other control bytes and 0x7f; EXTRA lists further
 * bytes to escape, may be NULL). */
void escape_write(FILE *out, const char *bytes, size_t len, const char *extra);
/* The same for a NUL-terminated TEXT. */
void escape_puts(FILE *out, const char *text);
/* The LEN BYTES escaped into a new string (NUL-terminated); NULL when out
 * of memory. */
char *escape_bytes(const char *bytes, size_t len);
/* The same for a NUL-terminated TEXT. */
char *escape_string(const char *text);

/* Undoes \ooo escapes (\000 to \377) in place, as mountinfo writes them;
 * a backslash not followed by three octal digits is kept as it is. */
void unescape_octal(char *text);
/* The strict undoing that the trace and pack formats ask for: the LEN
 * bytes at TEXT, in place, NUL-terminated, *OUT_LEN their new length.
 * Returns 0; -1 when a backslash anywhere is not followed by three octal
 * digits (checked over the whole text first, the text left as it was);
 * -2 when an escape is above \377, *OUT_LEN then its offset in TEXT (the
 * escape's four bytes still there, the bytes before it undone). */
int unescape_strict(char *text, size_t len, size_t *out_len);

#endif
