/* What the tools' command lines share: an option's number read by the one
 * number parser (size.h), or the one line that says why it is not one. */
#ifndef PAGETRACE_OPTION_H
#define PAGETRACE_OPTION_H

#include <stdint.h>

#include "size.h"

/* An option's number, as parse_number() reads it; on a bad one, a usage
 * error in one line (`tool: OPTION: 'TEXT': not a whole number`, or `not
 * from 1 to 256`, `less than 1`, `too large for 64 bits`) and exit status
 * 2. */
uint64_t number_option(const char *option, const char *text,
		       const struct number_units *units, uint64_t min,
		       uint64_t max);

#endif
