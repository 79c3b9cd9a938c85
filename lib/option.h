/* What the tools' command lines share: an option's number read by the one
 * number parser (size.h), or one of its words, else the one line that says
 * why it is neither; the one operand, -h and the bug address. */
#ifndef PAGETRACE_OPTION_H
#define PAGETRACE_OPTION_H

#include <argp.h>
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

/* The address at the end of every tool's --help. */
#define PAGETRACE_BUG_ADDRESS "<https://github.com/pagetrace/pagetrace/issues>"

/* Defines what argp prints for --version and at the end of --help. */
#define PAGETRACE_ARGP_PROGRAM(tool, version)				\
	const char *argp_program_version = tool " (pagetrace) " version; \
	const char *argp_program_bug_address = PAGETRACE_BUG_ADDRESS

/* -h for --help, as in every pagetrace tool (argp itself knows only -?),
 * hidden: the children of a tool's argp. */
extern const struct argp_child help_children[];

/* A tool's one operand: at ARGP_KEY_ARG it is stored in *SLOT, a second
 * one is the usage error AGAIN; at ARGP_KEY_END its absence is the usage
 * error MISSING, unless MISSING is NULL; other keys are left. */
void one_operand(struct argp_state *state, int key, char *arg,
		 const char **slot, const char *again, const char *missing);

#endif
