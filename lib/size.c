/* See size.h. */
#include "size.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct number_units size_units = {
	"a size (bytes, K, M or G)",
	{{"", 1}, {"K", 1 << 10}, {"k", 1 << 10}, {"M", 1 << 20},
	 {"m", 1 << 20}, {"G", 1 << 30}, {"g", 1 << 30}, {NULL, 0}},
};

/* The scale of SUFFIX among UNITS (a bare number: 1 unless UNITS say
 * otherwise); 0 when it is none of theirs. */
static uint64_t scale_of(const char *suffix, const struct number_units *units)
{
	const struct number_unit *u;

	for (u = units ? units->unit : NULL; u && u->suffix; u++)
		if (strcmp(suffix, u->suffix) == 0)
			return u->scale;
	return suffix[0] == '\0' ? 1 : 0;
}

int parse_number(const char *text, const struct number_units *units,
		 uint64_t min, uint64_t max, uint64_t *value)
{
	size_t digits = strspn(text, "0123456789");
	uint64_t number, scale = scale_of(text + digits, units);
	int ret = parse_u64(text, digits, &number);

	if (ret == -1 || scale == 0)
		return NUMBER_SYNTAX;
	if (ret == -2 || number > UINT64_MAX / scale ||
	    number * scale < min || number * scale > max)
		return NUMBER_RANGE;
	*value = number * scale;
	return 0;
}

int parse_size(const char *text, uint64_t *bytes)
{
	return parse_number(text, &size_units, 0, UINT64_MAX, bytes) ? -1 : 0;
}

int parse_u64(const char *s, size_t len, uint64_t *value)
{
	uint64_t v = 0;
	size_t i;

	if (len == 0)
		return -1;
	for (i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return -1;
	for (i = 0; i < len; i++) {
		unsigned digit = (unsigned)(s[i] - '0');

		if (v > (UINT64_MAX - digit) / 10)
			return -2;
		v = v * 10 + digit;
	}
	*value = v;
	return 0;
}

const char *format_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"KiB", "MiB", "GiB"};
	double value = (double)bytes;
	size_t unit = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
		return buf;
	}
	value /= 1024.0;
	while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) {
		value /= 1024.0;
		unit++;
	}
	snprintf(buf, len, "%.1f %s", value, units[unit]);
	return buf;
}
