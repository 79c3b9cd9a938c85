/* tracefile-dump: prints what the C trace parser makes of a trace, so tests
 * can compare it with samples/expected/NAME.json (the same fixtures the
 * Python reader is checked against).
 *
 *   tracefile-dump [--lines] TRACE
 *
 * JSON output mirrors expected/NAME.json (strings as json_string() writes
 * them, see json.h). Malformed
 * lines are also reported on stderr as TRACE:LINE: reason. Exit status: 0,
 * or 1 when the trace could not be read at all (unknown version, I/O).
 */
#include "json.h"
#include "tracefile.h"

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
	tracefile_write_escaped(out, rec->path, rec->path_len, NULL);
	fprintf(out, " %llu", (unsigned long long)rec->offset);
	for (i = 0; i < rec->n_extra; i++) {
		fputc(' ', out);
		tracefile_write_escaped(out, rec->extra[i], rec->extra_len[i],
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
	if (t->present)
		fprintf(out, "{\"pages\": %llu, \"bytes\": %llu, \"files\": %llu, "
			"\"duration_us\": %llu, \"lost\": %llu}",
			(unsigned long long)t->pages,
			(unsigned long long)t->bytes,
			(unsigned long long)t->files,
			(unsigned long long)t->duration_us,
			(unsigned long long)t->lost);
	else
		fputs("null", out);
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
	size_t n;
};

static int note_malformed(struct line_list *list, const struct tracefile *tf)
{
	size_t *grown = realloc(list->lines, (list->n + 1) * sizeof(*grown));

	if (!grown)
		return -1;
	list->lines = grown;
	list->lines[list->n++] = tf->line_no;
	fprintf(stderr, "%s:%zu: %s\n", tf->name, tf->line_no, tf->error);
	return 0;
}

/* Records go out as they are parsed, but the header (which the records
 * may change, e.g. page-size) only after the first record or EOF, so the
 * JSON is buffered in memory until the end. */
static int dump(struct tracefile *tf, int as_lines)
{
	char *body = NULL;
	size_t body_len = 0;
	struct line_list malformed = {NULL, 0};
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
		fprintf(stderr, "tracefile-dump: %s: %s\n", tf->name,
			tf->error);
	if (records)
		fclose(records);
	free(body);
	free(malformed.lines);
	return ret;
}

int main(int argc, char **argv)
{
	struct tracefile tf;
	const char *path;
	int as_lines = 0, ret = 1;
	FILE *in;

	if (argc == 3 && strcmp(argv[1], "--lines") == 0)
		as_lines = 1;
	else if (argc != 2) {
		fprintf(stderr, "usage: tracefile-dump [--lines] TRACE\n");
		return 2;
	}
	path = argv[argc - 1];
	in = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	if (!in) {
		fprintf(stderr, "tracefile-dump: %s: %s\n", path,
			strerror(errno));
		return 1;
	}
	if (tracefile_init(&tf, in, path) < 0) {
		fprintf(stderr, "tracefile-dump: %s\n", strerror(errno));
		goto cleanup;
	}
	ret = dump(&tf, as_lines);
	tracefile_close(&tf);
cleanup:
	if (in != stdin)
		fclose(in);
	return ret;
}
