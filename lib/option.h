/* What the tools' command lines share: an option's number read by the one
 * number parser (size.h), or one of its words; else the one line that says
 * why it is neither. */
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

/* One of an option's words, and the value it stands for. */
struct option_word {
	const char *word;
	int value;
};

/* The value of TEXT among WORDS (up to a NULL word); on any other text, a
 * usage error in one line (`tool: --mode: 'fast': not auto, concurrent or
 * none`) and exit status 2. */
int word_option(const char *option, const char *text,
		const struct option_word *words);

#endif
