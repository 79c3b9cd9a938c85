/* See option.h. */
#include "option.h"
#include "errmsg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t number_option(const char *option, const char *text,
		       const struct number_units *units, uint64_t min,
		       uint64_t max)
{
	uint64_t value;
	int ret = parse_number(text, units, min, max, &value);

	if (ret == 0)
		return value;
	if (ret == NUMBER_SYNTAX)
		errmsg(option, "'%s': not %s", text,
		       units ? units->what : "a whole number");
	else if (parse_number(text, units, 0, UINT64_MAX, &value) < 0)
		errmsg(option, "'%s': too large for 64 bits", text);
	else if (max == UINT64_MAX)
		errmsg(option, "'%s': less than %llu", text,
		       (unsigned long long)min);
	else
		errmsg(option, "'%s': not from %llu to %llu", text,
		       (unsigned long long)min, (unsigned long long)max);
	exit(2);
}

int word_option(const char *option, const char *text,
		const struct option_word *words)
{
	char list[512] = "";
	size_t n = 0, used = 0;

	for (n = 0; words[n].word; n++)
		if (strcmp(text, words[n].word) == 0)
			return words[n].value;
	for (size_t i = 0; i < n && used < sizeof(list); i++)
		used += (size_t)snprintf(list + used, sizeof(list) - used,
					 "%s%s", i == 0 ? "" : i + 1 < n ?
					 ", " : " or ", words[i].word);
	errmsg(option, "'%s': not %s", text, list);
	exit(2);
}

static const struct argp_option help_options[] = {
	{NULL, 'h', NULL, OPTION_HIDDEN, NULL, 0},
	{NULL, 0, NULL, 0, NULL, 0},
};

static error_t parse_help(int key, char *arg, struct argp_state *state)
{
	(void)arg;
	if (key != 'h')
		return ARGP_ERR_UNKNOWN;
	argp_state_help(state, state->out_stream, ARGP_HELP_STD_HELP);
	return 0;
}

static const struct argp help_argp = {help_options, parse_help, NULL, NULL,
				      NULL, NULL, NULL};

const struct argp_child help_children[] = {
	{&help_argp, 0, NULL, 0},
	{NULL, 0, NULL, 0},
};

void one_operand(struct argp_state *state, int key, char *arg,
		 const char **slot, const char *again, const char *missing)
{
	if (key == ARGP_KEY_ARG && *slot)
		argp_error(state, "%s", again);
	else if (key == ARGP_KEY_ARG)
		*slot = arg;
	else if (key == ARGP_KEY_END && !*slot && missing)
		argp_error(state, "%s", missing);
}
