/* What replay skips: one line for each bad input (`replay: PATH: reason`),
 * the tally of pages by reason, and the reasons' names (the `skipped` keys
 * of --json, docs/data-formats.md). */
#include "replay.h"
#include "escape.h"

#include <stdarg.h>
#include <stdlib.h>

#define SKIP_KEY(constant, key) [constant] = key,
static const char *const names[SKIP_COUNT] = { SKIP_REASONS(SKIP_KEY) };

const char *skip_name(enum skip_reason reason)
{
	return names[reason];
}

/* The path is escaped as in the trace, so that one line stays one line
 * whatever the name. */
void skip_message(struct replay *r, enum skip_reason reason, uint64_t count,
		  const char *path, size_t path_len, const char *fmt, ...)
{
	char *what = escape_bytes(path, path_len);
	va_list ap;

	r->skipped[reason] += count;
	va_start(ap, fmt);
	verrmsg(what ? what : "(path)", fmt, ap);
	va_end(ap);
	free(what);
	if (r->opt.strict && !r->fatal) {
		errmsg(NULL, "stopping (--strict)");
		__atomic_store_n(&r->fatal, 1, __ATOMIC_RELAXED);
	}
}
