/* tracefile-dump: prints what the C trace parser makes of a trace, so tests
 * can compare it with samples/expected/NAME.json (the same fixtures the
 * Python reader is checked against).
 *
 *   tracefile-dump [--lines] TRACE
 *
 * JSON output mirrors expected/NAME.json (strings as json_string() writes
 * them, see json.h); in version 2 the kind is the first of the extra
 * fields. Malformed lines are also reported on stderr as
 * `tracefile-dump: TRACE:LINE: reason`. Exit status: 0, 1 when the trace
 * was refused (empty, binary, unknown version, bad header) or could not be
 * read, 2 on a usage error.
 */
#include "array.h"
#include "errmsg.h"
#include "json.h"
#include "option.h"
#include "tracefile.h"
#include "escape.h"

#include <argp.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void json_record(FILE *out, const struct tracefile_record *rec,
			int first)
{
	size_t i;

	fprintf(out, "%s\n  [%llu, ", first ? "" : ",",
		(unsigned long long)rec->timestamp_us);
	json_string(out, rec->path, rec->path_len);
	fprintf(out, ", %llu, [", (unsigned long long)rec->offset);
	for (i = 0; i < rec->n_extra; i++) {
		if (i)
			fputs(", ", out);
		json_string(out, rec->extra[i], rec->extra_len[i]);
	}
	fputs("]]", out);
}

static void line_record(FILE *out, const struct tracefile_record *rec)
{
	size_t i;

	fprintf(out, "%zu %llu ", rec->line_no,
		(unsigned long long)rec->timestamp_us);
	escape_write(out, rec->path, rec->path_len, NULL);
	fprintf(out, " %llu", (unsigned long long)rec->offset);
	for (i = 0; i < rec->n_extra; i++) {
		fputc(' ', out);
		escape_write(out, rec->extra[i], rec->extra_len[i],
					NULL);
	}
	fputc('\n', out);
}

static void json_tail(FILE *out, const struct tracefile *tf,
		      const size_t *malformed, size_t n_malformed)
{
	const struct tracefile_trailer *t = &tf->trailer;
	size_t i;

	fputs("\n ],\n \"malformed_lines\": [", out);
	for (i = 0; i < n_malformed; i++)
		fprintf(out, "%s%zu", i ? ", " : "", malformed[i]);
	fputs("],\n \"trailer\": ", out);
	if (!t->present) {
		fputs("null\n}\n", out);
		return;
	}
	fprintf(out, "{\"pages\": %llu, \"bytes\": %llu, \"files\": %llu, "
		"\"duration_us\": %llu, \"lost\": %llu",
		(unsigned long long)t->pages, (unsigned long long)t->bytes,
		(unsigned long long)t->files,
		(unsigned long long)t->duration_us,
		(unsigned long long)t->lost);
	/* Version 2 trailers also count access and map records. */
	if (tf->version >= 2)
		fprintf(out, ", \"accessed\": %llu, \"mapped\": %llu",
			(unsigned long long)t->accessed,
			(unsigned long long)t->mapped);
	fputs("}", out);
	fputs("\n}\n", out);
}

static void json_head(FILE *out, const struct tracefile *tf)
{
	size_t i;

	fprintf(out, "{\n \"version\": %d,\n \"page_size\": %llu,\n"
		" \"columns\": [", tf->version,
		(unsigned long long)tf->page_size);
	for (i = 0; i < tf->n_columns; i++) {
		if (i)
			fputs(", ", out);
		json_string(out, tf->columns[i], strlen(tf->columns[i]));
	}
	fputs("],\n \"records\": [", out);
}

static void json_unsupported(FILE *out, const char *version)
{
	const char *p = version;

	while (*p >= '0' && *p <= '9')
		p++;
	if (*version && !*p && p - version < 19) {
		fprintf(out, "{\"unsupported_version\": %s}\n", version);
		return;
	}
	fputs("{\"unsupported_version\": ", out);
	json_string(out, version, strlen(version));
	fputs("}\n", out);
}

struct line_list {
	size_t *lines;
	size_t n, cap;
};

static int note_malformed(struct line_list *list, const struct tracefile *tf)
{
	if (array_reserve(&list->lines, &list->cap, list->n + 1,
			  sizeof(*list->lines)) < 0)
		return -1;
	list->lines[list->n++] = tf->line_no;
	errmsg(NULL, "%s:%zu: %s", tf->name, tf->line_no, tf->error);
	return 0;
}

/* The JSON is buffered in memory until the end, so that a file refused
 * as a whole, or an I/O error, leaves no half-written object on stdout. */
static int dump(struct tracefile *tf, int as_lines)
{
	char *body = NULL;
	size_t body_len = 0;
	struct line_list malformed = {NULL, 0, 0};
	FILE *records = open_memstream(&body, &body_len);
	const struct tracefile_record *rec;
	enum tracefile_status status;
	int ret = 1, first = 1;

	if (!records)
		goto cleanup;
	while ((status = tracefile_next(tf, &rec)) != TRACEFILE_EOF) {
		if (status == TRACEFILE_ERROR)
			goto cleanup;
		if (status == TRACEFILE_MALFORMED) {
			if (note_malformed(&malformed, tf) < 0)
				goto cleanup;
			continue;
		}
		if (as_lines)
			line_record(records, rec);
		else
			json_record(records, rec, first);
		first = 0;
	}
	if (fflush(records) != 0)
		goto cleanup;
	if (!as_lines)
		json_head(stdout, tf);
	fwrite(body, 1, body_len, stdout);
	if (!as_lines)
		json_tail(stdout, tf, malformed.lines, malformed.n);
	ret = 0;
cleanup:
	if (ret && tf->unsupported_version && !as_lines)
		json_unsupported(stdout, tf->unsupported_version);
	if (ret && tf->error[0])
		errmsg(tf->name, "%s", tf->error);
	else if (ret)
		errmsg(tf->name, "%s", errmsg_strerror(errno));
	if (records)
		fclose(records);
	free(body);
	free(malformed.lines);
	return ret;
}

const char *argp_program_version = "tracefile-dump (pagetrace) " PAGETRACE_VERSION;

static const char doc[] =
"Prints what the C trace parser (lib/tracefile.c) makes of TRACE, as\n"
"JSON like samples/expected/NAME.json, or one line per record. TRACE '-'\n"
"reads stdin. A test tool: it is not installed.\n"
"\v"
"EXAMPLES\n"
"  tracefile-dump samples/basic.log\n"
"  tracefile-dump --lines samples/used.log\n"
"  trace -- ls | tracefile-dump -\n"
"\n"
"Exit status: 0; 1 when the trace was refused or could not be read; 2 on\n"
"a usage error.\n";

enum { OPT_LINES = 0x100 };

static const struct argp_option argp_options[] = {
	{"lines", OPT_LINES, NULL, 0,
	 "one line per record: line number, then the fields re-escaped", 0},
	{NULL, 0, NULL, 0, NULL, 0},
};

struct dump_args {
	const char *path;
	int as_lines;
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	struct dump_args *args = state->input;

	switch (key) {
	case OPT_LINES:
		args->as_lines = 1;
		return 0;
	case ARGP_KEY_ARG:
	case ARGP_KEY_END:
		one_operand(state, key, arg, &args->path, "more than one TRACE",
			    "no TRACE given");
		return 0;
	}
	return ARGP_ERR_UNKNOWN;
}

int main(int argc, char **argv)
{
	static const struct argp argp = {argp_options, parse_arg, "TRACE", doc,
					 help_children, NULL, NULL};
	struct dump_args args = {NULL, 0};
	struct tracefile tf;
	int ret = 1;
	FILE *in;

	errmsg_init("tracefile-dump");
	argp_err_exit_status = 2;
	if (argp_parse(&argp, argc, argv, 0, NULL, &args) != 0)
		return 2;
	in = strcmp(args.path, "-") == 0 ? stdin : fopen(args.path, "r");
	if (!in) {
		errmsg(args.path, "%s", errmsg_strerror(errno));
		return 1;
	}
	if (tracefile_init(&tf, in, args.path) < 0) {
		errmsg(NULL, "%s", errmsg_strerror(errno));
		goto cleanup;
	}
	ret = dump(&tf, args.as_lines);
	tracefile_close(&tf);
cleanup:
	if (in != stdin)
		fclose(in);
	return ret;
}
