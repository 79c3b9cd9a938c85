/* libFuzzer target: the one parser of /proc/self/mountinfo (lib/mountinfo.c),
 * line by line as for_each_mount() calls it. A line it accepts has every
 * field it promises, each a NUL-terminated string inside the line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mountinfo.h"

static int inside(const char *s, const char *line, size_t len)
{
	return s && s >= line && s < line + len + 1 && memchr(s, '\0', line + len + 1 - s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *line = malloc(size + 1);
	struct mount_entry m;

	if (!line)
		return 0;
	memcpy(line, data, size);
	line[size] = '\0';
	if (mountinfo_parse_line(line, &m) == 0 &&
	    !(inside(m.root, line, size) && inside(m.point, line, size) &&
	      inside(m.fstype, line, size) && inside(m.source, line, size) &&
	      inside(m.options, line, size)))
		abort();
	free(line);
	return 0;
}
