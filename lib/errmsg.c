/* See errmsg.h. */
#include "errmsg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tool_name = "pagetrace";

void errmsg_init(const char *tool)
{
	tool_name = tool;
}

const char *errmsg_tool(void)
{
	return tool_name;
}

const char *errmsg_strerror(int err)
{
	return err == ENOMEM ? "out of memory" : strerror(err);
}

/* Writes the whole line at once; falls back to stdio pieces when even
 * the line cannot be allocated. */
void verrmsg(const char *what, const char *fmt, va_list ap)
{
	char *line = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&line, &len);
	FILE *out = mem ? mem : stderr;

	fprintf(out, "%s: ", tool_name);
	if (what)
		fprintf(out, "%s: ", what);
	vfprintf(out, fmt, ap);
	fputc('\n', out);
	if (mem && fclose(mem) == 0) {
		fwrite(line, 1, len, stderr);
		fflush(stderr);
	}
	free(line);
}

void errmsg(const char *what, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verrmsg(what, fmt, ap);
	va_end(ap);
}

int errmsg_stdout_flushed(void)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return 0;
	errmsg("stdout", "%s", errmsg_strerror(errno));
	return -1;
}
