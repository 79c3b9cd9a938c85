/* Reader for pagetrace trace format versions 1 and 2; see tracefile.h and
 * docs/trace-format.md. */
#include "tracefile.h"

#include "array.h"
#include "escape.h"
#include "size.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Longest piece of a bad value quoted in a message. */
#define QUOTE_MAX 64

struct field {
	char *start;
	size_t len;
};

/* A header value, pointing into tf->data; NULL when the key is absent. */
struct header_value {
	char *text;
	size_t len;
};

struct header {
	struct header_value version, page_size, columns, records;
};

static const char *const kind_names[TRACEFILE_KIND_COUNT] = {
	[TRACEFILE_KIND_READ] = "read",
	[TRACEFILE_KIND_ACCESS] = "access",
	[TRACEFILE_KIND_MAP] = "map",
};

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Turns every \ooo in FIELD back into its byte, in place, and terminates
 * the result with NUL. Returns -1 on a backslash that is not followed by
 * three octal digits naming a byte (\000 to \377). */
static int unescape_in_place(struct field *field)
{
	size_t len;

	if (unescape_strict(field->start, field->len, &len) < 0)
		return -1;
	field->len = len;
	return 0;
}

/* Splits LINE (LEN bytes) into space/tab separated fields, in place: the
 * separator after each field becomes NUL. Returns the number of fields, or
 * -1 when out of memory. */
static long split_fields(char *line, size_t len, struct field **fields,
			 size_t *cap)
{
	size_t n = 0, i = 0;

	while (i < len) {
		size_t start;

		while (i < len && is_blank(line[i]))
			i++;
		if (i == len)
			break;
		start = i;
		while (i < len && !is_blank(line[i]))
			i++;
		if (array_reserve(fields, cap, n + 1, sizeof(**fields)) < 0)
			return -1;
		(*fields)[n].start = line + start;
		(*fields)[n].len = i - start;
		n++;
		if (i < len)
			line[i++] = '\0';
	}
	return (long)n;
}

/* Writes at most QUOTE_MAX bytes of S into OUT (CAP bytes), escaped as the
 * trace format escapes paths, so a message stays one line. */
static void quote_escaped(char *out, size_t cap, const char *s, size_t len)
{
	FILE *mem = fmemopen(out, cap, "w");

	out[0] = '\0';
	if (!mem)
		return;
	escape_write(mem, s, len > QUOTE_MAX ? QUOTE_MAX : len,
				NULL);
	fclose(mem);
}

static void free_columns(struct tracefile *tf)
{
	size_t i;

	for (i = 0; i < tf->n_columns; i++)
		free(tf->columns[i]);
	free(tf->columns);
	tf->columns = NULL;
	tf->n_columns = 0;
}

/* Copies N FIELDS into tf->columns. Returns -1 when out of memory. */
static int set_columns(struct tracefile *tf, const struct field *fields,
		       size_t n)
{
	size_t i;

	free_columns(tf);
	tf->columns = calloc(n + 1, sizeof(*tf->columns));
	if (!tf->columns)
		return -1;
	for (i = 0; i < n; i++) {
		tf->columns[i] = strndup(fields[i].start, fields[i].len);
		if (!tf->columns[i])
			return -1;
		tf->n_columns++;
	}
	return 0;
}

/* timestamp_us path offset, and kind in version 2. */
static int set_default_columns(struct tracefile *tf)
{
	static char *const names[] = {"timestamp_us", "path", "offset", "kind"};
	struct field fields[4];
	size_t i;

	for (i = 0; i < 4; i++) {
		fields[i].start = names[i];
		fields[i].len = strlen(names[i]);
	}
	return set_columns(tf, fields, tf->version >= 2 ? 4 : 3);
}

int tracefile_init(struct tracefile *tf, FILE *stream, const char *name)
{
	memset(tf, 0, sizeof(*tf));
	tf->stream = stream;
	tf->name = name;
	tf->version = 1;
	tf->page_size = TRACEFILE_DEFAULT_PAGE_SIZE;
	return set_default_columns(tf);
}

void tracefile_close(struct tracefile *tf)
{
	free_columns(tf);
	free(tf->data);
	free(tf->record.extra);
	free(tf->record.extra_len);
	free(tf->fields);
	free(tf->unsupported_version);
	memset(tf, 0, sizeof(*tf));
}

static enum tracefile_status refuse(struct tracefile *tf, const char *reason)
{
	snprintf(tf->error, sizeof(tf->error), "%s", reason);
	tf->failed = 1;
	return TRACEFILE_ERROR;
}

/* Reads the whole stream into tf->data, NUL-terminated. */
static enum tracefile_status load_all(struct tracefile *tf)
{
	size_t cap = 0;

	tf->loaded = 1;
	for (;;) {
		size_t got;

		/* Room for a 4 KiB read and the NUL. */
		if (array_reserve(&tf->data, &cap, tf->size + 4096 + 1, 1))
			return refuse(tf, "out of memory");
		got = fread(tf->data + tf->size, 1, cap - tf->size - 1,
			    tf->stream);
		tf->size += got;
		if (got == 0)
			break;
	}
	if (ferror(tf->stream)) {
		snprintf(tf->error, sizeof(tf->error), "read error: %s",
			 errno == ENOMEM ? "out of memory" : strerror(errno));
		tf->failed = 1;
		return TRACEFILE_ERROR;
	}
	tf->data[tf->size] = '\0';
	if (tf->size == 0)
		return refuse(tf, "empty file");
	if (memchr(tf->data, '\0', tf->size))
		return refuse(tf, "binary data (NUL byte), not a trace");
	return TRACEFILE_RECORD;
}

/* The next line of tf->data without its '\n' (terminated with NUL in its
 * place); 0 at the end of the data. */
static int next_line(struct tracefile *tf, char **line, size_t *len)
{
	char *start, *end;

	if (tf->pos >= tf->size)
		return 0;
	start = tf->data + tf->pos;
	end = memchr(start, '\n', tf->size - tf->pos);
	if (!end)
		end = tf->data + tf->size;
	*end = '\0';
	*line = start;
	*len = (size_t)(end - start);
	tf->pos += *len + 1;
	tf->line_no++;
	return 1;
}

static size_t trim_trailing_blanks(const char *s, size_t len)
{
	while (len > 0 && is_blank(s[len - 1]))
		len--;
	return len;
}

/* `# end: pages=N bytes=N files=N duration_us=N lost=N [accessed=N
 * mapped=N]`; unknown keys and unparsable values are ignored. */
static void parse_trailer(struct tracefile *tf, char *value, size_t len)
{
	static const struct {
		const char *key;
		size_t offset;
	} keys[] = {
		{"pages", offsetof(struct tracefile_trailer, pages)},
		{"bytes", offsetof(struct tracefile_trailer, bytes)},
		{"files", offsetof(struct tracefile_trailer, files)},
		{"duration_us", offsetof(struct tracefile_trailer, duration_us)},
		{"lost", offsetof(struct tracefile_trailer, lost)},
		{"accessed", offsetof(struct tracefile_trailer, accessed)},
		{"mapped", offsetof(struct tracefile_trailer, mapped)},
	};
	struct field *fields = NULL;
	size_t cap = 0, i, k;
	long n = split_fields(value, len, &fields, &cap);

	memset(&tf->trailer, 0, sizeof(tf->trailer));
	tf->trailer.present = 1;
	for (i = 0; n > 0 && i < (size_t)n; i++) {
		char *eq = memchr(fields[i].start, '=', fields[i].len);
		size_t key_len;

		if (!eq)
			continue;
		key_len = (size_t)(eq - fields[i].start);
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			if (strlen(keys[k].key) != key_len ||
			    memcmp(keys[k].key, fields[i].start, key_len) != 0)
				continue;
			parse_u64(eq + 1, fields[i].len - key_len - 1,
				  (uint64_t *)((char *)&tf->trailer +
					       keys[k].offset));
		}
	}
	free(fields);
}

/* Splits a `# key: value` comment line. Returns 0 when LINE is not one.
 * The value loses trailing carriage returns (CRLF files) and blanks. */
static int split_comment(char *line, size_t len, struct header_value *key,
			 struct header_value *value)
{
	size_t i = 1;

	while (i < len && is_blank(line[i]))
		i++;
	key->text = line + i;
	while (i < len && ((line[i] >= 'a' && line[i] <= 'z') ||
			   (line[i] >= '0' && line[i] <= '9') ||
			   line[i] == '-' || line[i] == '_'))
		i++;
	key->len = (size_t)(line + i - key->text);
	if (key->len == 0 || i == len || line[i] != ':')
		return 0;
	i++;
	while (i < len && is_blank(line[i]))
		i++;
	while (len > i && line[len - 1] == '\r')
		len--;
	value->text = line + i;
	value->len = trim_trailing_blanks(value->text, len - i);
	return 1;
}

static int key_is(const struct header_value *key, const char *name)
{
	return key->len == strlen(name) &&
	       memcmp(key->text, name, key->len) == 0;
}

/* A comment line: the trailer anywhere, header keys only before the first
 * record (HEADER is NULL after it). */
static void parse_comment(struct tracefile *tf, char *line, size_t len,
			  struct header *header)
{
	struct header_value key, value;

	if (!split_comment(line, len, &key, &value))
		return;
	if (key_is(&key, "end"))
		parse_trailer(tf, value.text, value.len);
	else if (!header)
		return;
	else if (key_is(&key, "pagetrace-format"))
		header->version = value;
	else if (key_is(&key, "page-size"))
		header->page_size = value;
	else if (key_is(&key, "columns"))
		header->columns = value;
	else if (key_is(&key, "records"))
		header->records = value;
}

static enum tracefile_status check_version(struct tracefile *tf,
					   const struct header_value *value)
{
	uint64_t version;

	if (!value->text)
		return TRACEFILE_RECORD;
	if (parse_u64(value->text, value->len, &version) == 0 &&
	    version >= 1 && version <= TRACEFILE_VERSION_MAX) {
		tf->version = (int)version;
		return TRACEFILE_RECORD;
	}
	free(tf->unsupported_version);
	tf->unsupported_version = strndup(value->text, value->len);
	snprintf(tf->error, sizeof(tf->error),
		 "unsupported trace format version '%.*s' (this reader knows "
		 "1, 2)",
		 (int)(value->len > QUOTE_MAX ? QUOTE_MAX : value->len),
		 value->text);
	tf->failed = 1;
	return TRACEFILE_ERROR;
}

/* Offsets are checked against it, so a nonsense value would make every
 * record malformed: better to refuse the file. */
static enum tracefile_status check_page_size(struct tracefile *tf,
					     const struct header_value *value)
{
	uint64_t size;

	if (!value->text)
		return TRACEFILE_RECORD;
	if (parse_u64(value->text, value->len, &size) != 0 || size < 512 ||
	    size > (1u << 30) || (size & (size - 1)) != 0) {
		snprintf(tf->error, sizeof(tf->error), "bad page-size '%.*s'",
			 (int)(value->len > QUOTE_MAX ? QUOTE_MAX : value->len),
			 value->text);
		tf->failed = 1;
		return TRACEFILE_ERROR;
	}
	tf->page_size = size;
	return TRACEFILE_RECORD;
}

static int kind_of(const char *s, size_t len, enum tracefile_kind *kind)
{
	int k;

	for (k = 0; k < TRACEFILE_KIND_COUNT; k++)
		if (strlen(kind_names[k]) == len &&
		    memcmp(kind_names[k], s, len) == 0) {
			*kind = (enum tracefile_kind)k;
			return 0;
		}
	return -1;
}

static enum tracefile_status bad_header(struct tracefile *tf,
					const char *what, const char *s,
					size_t len)
{
	char quoted[4 * QUOTE_MAX + 1];

	quote_escaped(quoted, sizeof(quoted), s, len);
	snprintf(tf->error, sizeof(tf->error), "bad header: %s '%s'", what,
		 quoted);
	tf->failed = 1;
	return TRACEFILE_ERROR;
}

/* Version 2's `records` key: the kinds this trace may hold. */
static enum tracefile_status check_records(struct tracefile *tf,
					   struct header_value *value)
{
	struct field *fields = NULL;
	size_t cap = 0, i;
	long n;
	enum tracefile_kind kind;
	enum tracefile_status status = TRACEFILE_RECORD;

	if (!value->text || value->len == 0) {
		return refuse(tf, "bad header: no records key (version 2 needs "
			      "it)");
	}
	n = split_fields(value->text, value->len, &fields, &cap);
	if (n < 0)
		status = refuse(tf, "out of memory");
	for (i = 0; status == TRACEFILE_RECORD && n > 0 && i < (size_t)n; i++) {
		if (kind_of(fields[i].start, fields[i].len, &kind) == 0)
			tf->kinds_declared |= 1u << kind;
		else
			status = bad_header(tf, "records: unknown record kind",
					    fields[i].start, fields[i].len);
	}
	free(fields);
	return status;
}

/* `columns`, and in version 2 `kind` as the fourth of them. */
static enum tracefile_status check_columns(struct tracefile *tf,
					   struct header_value *value)
{
	struct field *fields = NULL;
	size_t cap = 0;
	long n = 0;
	int ret = 0;

	if (value->text && value->len > 0) {
		n = split_fields(value->text, value->len, &fields, &cap);
		ret = n < 0 ? -1 : set_columns(tf, fields, (size_t)n);
	} else {
		ret = set_default_columns(tf);
	}
	free(fields);
	if (ret < 0)
		return refuse(tf, "out of memory");
	if (tf->version < 2)
		return TRACEFILE_RECORD;
	if (tf->n_columns < 4)
		return refuse(tf, "bad header: columns: version 2 needs 'kind' "
			      "as the fourth name");
	if (strcmp(tf->columns[3], "kind") != 0)
		return bad_header(tf, "columns: version 2 needs 'kind' as the "
				  "fourth name, not", tf->columns[3],
				  strlen(tf->columns[3]));
	return TRACEFILE_RECORD;
}

static enum tracefile_status check_header(struct tracefile *tf,
					  struct header *h)
{
	enum tracefile_status status = check_version(tf, &h->version);

	if (status == TRACEFILE_RECORD)
		status = check_page_size(tf, &h->page_size);
	if (status == TRACEFILE_RECORD)
		status = check_columns(tf, &h->columns);
	if (status == TRACEFILE_RECORD && tf->version >= 2)
		status = check_records(tf, &h->records);
	return status;
}

/* Nothing but blanks once a final \r is removed. */
static int line_is_blank(const char *line, size_t len)
{
	if (len > 0 && line[len - 1] == '\r')
		len--;
	return trim_trailing_blanks(line, len) == 0;
}

/* Reads the whole input and its header: the comment and blank lines before
 * the first record, which is left to be read next. */
static enum tracefile_status read_header(struct tracefile *tf)
{
	struct header header;
	char *line;
	size_t len, pos = 0, line_no = 0;

	if (load_all(tf) != TRACEFILE_RECORD)
		return TRACEFILE_ERROR;
	memset(&header, 0, sizeof(header));
	while (pos = tf->pos, line_no = tf->line_no,
	       next_line(tf, &line, &len)) {
		if (line[0] == '#') {
			parse_comment(tf, line, len, &header);
			continue;
		}
		if (line_is_blank(line, len))
			continue;
		/* The first record: give it back, and its newline. */
		if (tf->pos <= tf->size)
			line[len] = '\n';
		tf->pos = pos;
		tf->line_no = line_no;
		break;
	}
	return check_header(tf, &header);
}

static enum tracefile_status malformed(struct tracefile *tf,
				       enum tracefile_defect defect,
				       const char *reason)
{
	tf->defect = defect;
	snprintf(tf->error, sizeof(tf->error), "%s", reason);
	return TRACEFILE_MALFORMED;
}

/* A timestamp or offset field: WHAT names it, DEFECT is its "not an
 * unsigned integer" defect and DEFECT + 1 its "does not fit" one. */
static enum tracefile_status parse_field_number(struct tracefile *tf,
						const struct field *field,
						const char *what,
						enum tracefile_defect defect,
						uint64_t *value)
{
	int ret = parse_u64(field->start, field->len, value);

	if (ret == 0)
		return TRACEFILE_RECORD;
	tf->defect = ret == -1 ? defect : defect + 1;
	snprintf(tf->error, sizeof(tf->error), "%s %s", what,
		 ret == -1 ? "is not an unsigned integer" :
		 "does not fit in 64 bits");
	return TRACEFILE_MALFORMED;
}

static enum tracefile_status parse_offset(struct tracefile *tf,
					  const struct field *field,
					  uint64_t *offset)
{
	enum tracefile_status status = parse_field_number(tf, field, "offset",
						    TRACEFILE_DEFECT_OFFSET,
						    offset);

	if (status != TRACEFILE_RECORD || *offset % tf->page_size == 0)
		return status;
	tf->defect = TRACEFILE_DEFECT_UNALIGNED;
	snprintf(tf->error, sizeof(tf->error),
		 "offset %llu is not a multiple of page-size %llu",
		 (unsigned long long)*offset,
		 (unsigned long long)tf->page_size);
	return TRACEFILE_MALFORMED;
}

/* The two arrays have one capacity: the second is grown to the first's. */
static int reserve_extra(struct tracefile *tf, size_t n)
{
	size_t len_cap = tf->extra_cap;

	if (n <= tf->extra_cap)
		return 0;
	if (array_reserve(&tf->record.extra, &tf->extra_cap, n,
			  sizeof(*tf->record.extra)) < 0)
		return -1;
	if (array_reserve(&tf->record.extra_len, &len_cap, tf->extra_cap,
			  sizeof(*tf->record.extra_len)) < 0) {
		tf->extra_cap = len_cap;   /* extra_len is still the old size */
		return -1;
	}
	return 0;
}

/* The columns after offset, unescaped (comm is escaped like a path, and so
 * is the kind, which is one of them). */
static enum tracefile_status parse_extra(struct tracefile *tf,
					 struct field *fields, size_t n)
{
	struct tracefile_record *rec = &tf->record;
	size_t i;

	if (reserve_extra(tf, n) < 0)
		return refuse(tf, "out of memory");
	rec->n_extra = n;
	for (i = 0; i < n; i++) {
		if (unescape_in_place(&fields[i]) < 0)
			return malformed(tf, TRACEFILE_DEFECT_EXTRA_ESCAPE,
					 "bad escape in an extra column");
		rec->extra[i] = fields[i].start;
		rec->extra_len[i] = fields[i].len;
	}
	return TRACEFILE_RECORD;
}

/* Version 2: the kind, the first extra column, must be known and declared
 * in the `records` header. */
static enum tracefile_status parse_kind(struct tracefile *tf)
{
	struct tracefile_record *rec = &tf->record;
	char quoted[4 * QUOTE_MAX + 1];

	if (tf->version < 2) {
		rec->kind = TRACEFILE_KIND_READ;
		return TRACEFILE_RECORD;
	}
	quote_escaped(quoted, sizeof(quoted), rec->extra[0], rec->extra_len[0]);
	if (kind_of(rec->extra[0], rec->extra_len[0], &rec->kind) < 0) {
		tf->defect = TRACEFILE_DEFECT_KIND;
		snprintf(tf->error, sizeof(tf->error),
			 "unknown record kind '%s'", quoted);
		return TRACEFILE_MALFORMED;
	}
	if (!(tf->kinds_declared & (1u << rec->kind))) {
		tf->defect = TRACEFILE_DEFECT_KIND_UNDECLARED;
		snprintf(tf->error, sizeof(tf->error), "record kind '%s' not "
			 "declared in the records header", quoted);
		return TRACEFILE_MALFORMED;
	}
	return TRACEFILE_RECORD;
}

/* The checks of the spec, in its order: the first failing one wins. A line
 * ending in \r is checked without it, and is malformed only when
 * everything else is right, so that CRLF gets a reason of its own. */
static enum tracefile_status parse_record(struct tracefile *tf, char *line,
					  size_t len, int crlf)
{
	struct field **fields = (struct field **)&tf->fields;
	struct tracefile_record *rec = &tf->record;
	enum tracefile_status status;
	long n = split_fields(line, len, fields, &tf->fields_cap);

	if (n < 0)
		return refuse(tf, "out of memory");
	rec->line_no = tf->line_no;
	if (n < 3)
		return malformed(tf, TRACEFILE_DEFECT_FIELDS,
				 "fewer than three fields");
	if (n == 3 && tf->version >= 2)
		return malformed(tf, TRACEFILE_DEFECT_NO_KIND,
				 "no record kind");
	status = parse_field_number(tf, &(*fields)[0], "timestamp",
			      TRACEFILE_DEFECT_TIMESTAMP, &rec->timestamp_us);
	if (status == TRACEFILE_RECORD)
		status = parse_offset(tf, &(*fields)[2], &rec->offset);
	if (status != TRACEFILE_RECORD)
		return status;
	if (unescape_in_place(&(*fields)[1]) < 0)
		return malformed(tf, TRACEFILE_DEFECT_PATH_ESCAPE,
				 "bad escape in path");
	rec->path = (*fields)[1].start;
	rec->path_len = (*fields)[1].len;
	status = parse_extra(tf, *fields + 3, (size_t)n - 3);
	if (status == TRACEFILE_RECORD)
		status = parse_kind(tf);
	if (status == TRACEFILE_RECORD && crlf)
		return malformed(tf, TRACEFILE_DEFECT_CRLF, "carriage return "
				 "at end of line (CRLF line endings?)");
	return status;
}

enum tracefile_status tracefile_next(struct tracefile *tf,
				     const struct tracefile_record **record)
{
	enum tracefile_status status;
	char *line;
	size_t len;

	tf->defect = TRACEFILE_DEFECT_NONE;
	if (tf->failed)
		return TRACEFILE_ERROR;
	tf->error[0] = '\0';
	if (!tf->loaded && read_header(tf) != TRACEFILE_RECORD)
		return TRACEFILE_ERROR;
	while (next_line(tf, &line, &len)) {
		int crlf = len > 0 && line[len - 1] == '\r';

		if (line[0] == '#') {
			parse_comment(tf, line, len, NULL);
			continue;
		}
		if (line_is_blank(line, len))
			continue;
		if (crlf)
			line[--len] = '\0';
		status = parse_record(tf, line, len, crlf);
		if (status == TRACEFILE_RECORD)
			*record = &tf->record;
		return status;
	}
	return TRACEFILE_EOF;
}

int tracefile_defect_is_offset(enum tracefile_defect defect)
{
	return defect == TRACEFILE_DEFECT_OFFSET ||
	       defect == TRACEFILE_DEFECT_OFFSET_HUGE ||
	       defect == TRACEFILE_DEFECT_UNALIGNED;
}

int tracefile_is_metadata(const char *path, size_t len)
{
	return len > 5 && memcmp(path, "/dev/", 5) == 0;
}

const char *tracefile_kind_name(enum tracefile_kind kind)
{
	return kind < TRACEFILE_KIND_COUNT ? kind_names[kind] : "?";
}
