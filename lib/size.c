/* See size.h. */
#include "size.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static int suffix_shift(char c)
{
	switch (c) {
	case 'k': case 'K': return 10;
	case 'm': case 'M': return 20;
	case 'g': case 'G': return 30;
	case '\0': return 0;
	}
	return -1;
}

int parse_size(const char *text, uint64_t *bytes)
{
	unsigned long long value;
	char *end;
	int shift;

	/* strtoull would take blanks, signs and "0x" too. */
	if (text[0] < '0' || text[0] > '9')
		return -1;
	errno = 0;
	value = strtoull(text, &end, 10);
	if (errno)
		return -1;
	shift = suffix_shift(*end);
	if (shift < 0 || (shift > 0 && end[1] != '\0') ||
	    value > (UINT64_MAX >> shift))
		return -1;
	*bytes = (uint64_t)value << shift;
	return 0;
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
