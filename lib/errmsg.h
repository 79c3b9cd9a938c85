/* One error helper for every pagetrace C tool: messages are one line,
 * `tool: what: why`, written with one write so that threads do not mix
 * them. The same failure is said in the same words everywhere: ENOMEM is
 * "out of memory", whatever strerror() calls it. */
#ifndef PAGETRACE_ERRMSG_H
#define PAGETRACE_ERRMSG_H

#include <stdarg.h>

/* The tool name that starts every message (default "pagetrace"). */
void errmsg_init(const char *tool);
const char *errmsg_tool(void);

/* `tool: what: why` on stderr, WHY from FMT; WHAT may be NULL, then the
 * line is `tool: why`. */
void errmsg(const char *what, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void verrmsg(const char *what, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/* Stdout took all that was printed: 0; else -1, said as `tool: stdout:
 * why` (a reader gone is EPIPE where SIGPIPE is ignored). */
int errmsg_stdout_flushed(void);

/* strerror(ERR), except "out of memory" for ENOMEM. */
const char *errmsg_strerror(int err);

#endif
