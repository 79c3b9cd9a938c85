/* See option.h. */
#include "option.h"
#include "errmsg.h"

#include <stdlib.h>

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
