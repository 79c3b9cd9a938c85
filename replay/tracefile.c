/* Reader for pagetrace trace format v1; see tracefile.h and
 * docs/trace-format.md. */
#include "tracefile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct field {
	char *start;
	size_t len;
};

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static int is_octal(char c)
{
	return c >= '0' && c <= '7';
}

/* Parses an unsigned decimal integer that fills the whole field.
 * Returns 0, -1 when it is not digits only, -2 when it overflows. */
static int parse_u64(const char *s, size_t len, uint64_t *value)
{
	uint64_t v = 0;
	size_t i;

	if (len == 0)
		return -1;
	for (i = 0; i < len; i++) {
		unsigned digit;

		if (s[i] < '0' || s[i] > '9')
			return -1;
		digit = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - digit) / 10)
			return -2;
		v = v * 10 + digit;
	}
	*value = v;
	return 0;
}

/* Turns every \ooo in FIELD back into its byte, in place, and terminates
 * the result with NUL. Returns -1 on a backslash that is not followed by
 * three octal digits naming a byte (\000 to \377). */
static int unescape_in_place(struct field *field)
{
	char *in = field->start, *end = field->start + field->len;
	char *out = field->start;

	while (in < end) {
		if (*in != '\\') {
			*out++ = *in++;
			continue;
		}
		if (end - in < 4 || in[1] < '0' || in[1] > '3' ||
		    !is_octal(in[2]) || !is_octal(in[3]))
			return -1;
		*out++ = (char)(((in[1] - '0') << 6) | ((in[2] - '0') << 3) |
				(in[3] - '0'));
		in += 4;
	}
	*out = '\0';
	field->len = (size_t)(out - field->start);
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
		if (n == *cap) {
			size_t new_cap = *cap ? *cap * 2 : 16;
			struct field *grown = realloc(*fields,
						      new_cap * sizeof(**fields));

			if (!grown)
				return -1;
			*fields = grown;
			*cap = new_cap;
		}
		(*fields)[n].start = line + start;
		(*fields)[n].len = i - start;
		n++;
		if (i < len)
			line[i++] = '\0';
	}
	return (long)n;
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

static int set_default_columns(struct tracefile *tf)
{
	static const char *const names[] = {"timestamp_us", "path", "offset"};
	size_t i;

	free_columns(tf);
	tf->columns = calloc(3, sizeof(*tf->columns));
	if (!tf->columns)
		return -1;
	for (i = 0; i < 3; i++) {
		tf->columns[i] = strdup(names[i]);
		if (!tf->columns[i])
			return -1;
		tf->n_columns++;
	}
	return 0;
}

int tracefile_init(struct tracefile *tf, FILE *stream, const char *name)
{
	memset(tf, 0, sizeof(*tf));
	tf->stream = stream;
	tf->name = name;
	tf->version = TRACEFILE_VERSION;
	tf->page_size = TRACEFILE_DEFAULT_PAGE_SIZE;
	return set_default_columns(tf);
}

void tracefile_close(struct tracefile *tf)
{
	free_columns(tf);
	free(tf->line);
	free(tf->record.extra);
	free(tf->record.extra_len);
	free(tf->fields);
	free(tf->unsupported_version);
	memset(tf, 0, sizeof(*tf));
}

static int header_columns(struct tracefile *tf, char *value, size_t len)
{
	struct field *fields = NULL;
	size_t cap = 0, i;
	long n = split_fields(value, len, &fields, &cap);
	int ret = -1;

	if (n < 0)
		goto cleanup;
	free_columns(tf);
	tf->columns = calloc((size_t)n + 1, sizeof(*tf->columns));
	if (!tf->columns)
		goto cleanup;
	for (i = 0; i < (size_t)n; i++) {
		tf->columns[i] = strndup(fields[i].start, fields[i].len);
		if (!tf->columns[i])
			goto cleanup;
		tf->n_columns++;
	}
	ret = 0;
cleanup:
	free(fields);
	return ret;
}

static int header_version(struct tracefile *tf, const char *value,
			  size_t len)
{
	uint64_t version;

	if (parse_u64(value, len, &version) == 0 &&
	    version == TRACEFILE_VERSION)
		return 0;
	free(tf->unsupported_version);
	tf->unsupported_version = strndup(value, len);
	snprintf(tf->error, sizeof(tf->error),
		 "unsupported trace format version '%.*s' (this reader knows %d)",
		 (int)(len > 64 ? 64 : len), value, TRACEFILE_VERSION);
	return -1;
}

static int header_page_size(struct tracefile *tf, const char *value,
			    size_t len)
{
	uint64_t size;

	/* Offsets are checked against it, so a nonsense value would make every
	 * record malformed: better to refuse the file. */
	if (parse_u64(value, len, &size) != 0 || size < 512 ||
	    size > (1u << 30) || (size & (size - 1)) != 0) {
		snprintf(tf->error, sizeof(tf->error),
			 "bad page-size '%.*s'", (int)(len > 64 ? 64 : len),
			 value);
		return -1;
	}
	tf->page_size = size;
	return 0;
}

/* `# end: pages=N bytes=N files=N duration_us=N lost=N`; unknown keys and
 * unparsable values are ignored. */
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

static size_t trim_trailing_blanks(const char *s, size_t len)
{
	while (len > 0 && is_blank(s[len - 1]))
		len--;
	return len;
}

/* Reads `# key: value` comment lines: header keys before the first record,
 * the trailer anywhere. Other comments are ignored. Returns -1 on a fatal
 * header (unknown version, bad page-size) with tf->error set. */
static int parse_comment(struct tracefile *tf, char *line, size_t len)
{
	size_t i = 1, key_start, key_len, value_start, value_len;
	char *value;

	while (i < len && is_blank(line[i]))
		i++;
	key_start = i;
	while (i < len && ((line[i] >= 'a' && line[i] <= 'z') ||
			   (line[i] >= '0' && line[i] <= '9') ||
			   line[i] == '-' || line[i] == '_'))
		i++;
	key_len = i - key_start;
	if (key_len == 0 || i == len || line[i] != ':')
		return 0;
	i++;
	while (i < len && is_blank(line[i]))
		i++;
	value_start = i;
	value = line + value_start;
	value_len = trim_trailing_blanks(value, len - value_start);

#define KEY_IS(name) (key_len == strlen(name) && \
		      memcmp(line + key_start, name, key_len) == 0)
	if (KEY_IS("end")) {
		parse_trailer(tf, value, value_len);
		return 0;
	}
	if (tf->seen_record)
		return 0;
	if (KEY_IS("pagetrace-format"))
		return header_version(tf, value, value_len);
	if (KEY_IS("page-size"))
		return header_page_size(tf, value, value_len);
	if (KEY_IS("columns") && header_columns(tf, value, value_len) < 0) {
		snprintf(tf->error, sizeof(tf->error), "out of memory");
		return -1;
	}
#undef KEY_IS
	return 0;
}

static enum tracefile_status malformed(struct tracefile *tf,
				       enum tracefile_defect defect,
				       const char *reason)
{
	tf->defect = defect;
	snprintf(tf->error, sizeof(tf->error), "%s", reason);
	return TRACEFILE_MALFORMED;
}

static enum tracefile_status parse_offset(struct tracefile *tf,
					  const struct field *field,
					  uint64_t *offset)
{
	uint64_t magnitude;
	int ret;

	if (field->len > 1 && field->start[0] == '-' &&
	    parse_u64(field->start + 1, field->len - 1, &magnitude) != -1)
		return malformed(tf, TRACEFILE_DEFECT_NEGATIVE,
				 "negative offset");
	ret = parse_u64(field->start, field->len, offset);
	if (ret == -1)
		return malformed(tf, TRACEFILE_DEFECT_OFFSET,
				 "offset is not an unsigned integer");
	if (ret == -2)
		return malformed(tf, TRACEFILE_DEFECT_HUGE,
				 "offset does not fit in 64 bits");
	if (*offset % tf->page_size != 0) {
		tf->defect = TRACEFILE_DEFECT_UNALIGNED;
		snprintf(tf->error, sizeof(tf->error),
			 "offset %llu is not a multiple of page-size %llu",
			 (unsigned long long)*offset,
			 (unsigned long long)tf->page_size);
		return TRACEFILE_MALFORMED;
	}
	return TRACEFILE_RECORD;
}

static int reserve_extra(struct tracefile *tf, size_t n)
{
	char **extra;
	size_t *extra_len;

	if (n <= tf->extra_cap)
		return 0;
	extra = realloc(tf->record.extra, n * sizeof(*extra));
	if (!extra)
		return -1;
	tf->record.extra = extra;
	extra_len = realloc(tf->record.extra_len, n * sizeof(*extra_len));
	if (!extra_len)
		return -1;
	tf->record.extra_len = extra_len;
	tf->extra_cap = n;
	return 0;
}

static enum tracefile_status parse_extra(struct tracefile *tf,
					 struct field *fields, size_t n)
{
	struct tracefile_record *rec = &tf->record;
	size_t i;

	if (reserve_extra(tf, n) < 0) {
		snprintf(tf->error, sizeof(tf->error), "out of memory");
		return TRACEFILE_ERROR;
	}
	rec->n_extra = n;
	for (i = 0; i < n; i++) {
		/* Extra columns such as comm are escaped like paths. */
		if (unescape_in_place(&fields[i]) < 0)
			return malformed(tf, TRACEFILE_DEFECT_ESCAPE,
					 "bad escape in an extra column");
		rec->extra[i] = fields[i].start;
		rec->extra_len[i] = fields[i].len;
	}
	return TRACEFILE_RECORD;
}

static enum tracefile_status parse_record(struct tracefile *tf, char *line,
					  size_t len, struct field **fields,
					  size_t *cap)
{
	struct tracefile_record *rec = &tf->record;
	enum tracefile_status status;
	long n = split_fields(line, len, fields, cap);

	if (n < 0) {
		snprintf(tf->error, sizeof(tf->error), "out of memory");
		return TRACEFILE_ERROR;
	}
	tf->seen_record = 1;
	rec->line_no = tf->line_no;
	if (n < 3)
		return malformed(tf, TRACEFILE_DEFECT_FIELDS,
				 "fewer than three fields");
	if (parse_u64((*fields)[0].start, (*fields)[0].len,
		      &rec->timestamp_us) != 0)
		return malformed(tf, TRACEFILE_DEFECT_TIMESTAMP,
				 "timestamp is not an unsigned integer");
	if (unescape_in_place(&(*fields)[1]) < 0)
		return malformed(tf, TRACEFILE_DEFECT_ESCAPE,
				 "backslash not followed by three octal digits");
	rec->path = (*fields)[1].start;
	rec->path_len = (*fields)[1].len;
	status = parse_offset(tf, &(*fields)[2], &rec->offset);
	if (status != TRACEFILE_RECORD)
		return status;
	return parse_extra(tf, *fields + 3, (size_t)n - 3);
}

static int line_is_blank(const char *line, size_t len)
{
	return trim_trailing_blanks(line, len) == 0;
}

enum tracefile_status tracefile_next(struct tracefile *tf,
				     const struct tracefile_record **record)
{
	struct field **fields = (struct field **)&tf->fields;
	enum tracefile_status status = TRACEFILE_EOF;
	ssize_t got;

	tf->defect = TRACEFILE_DEFECT_NONE;
	tf->error[0] = '\0';
	while ((got = getline(&tf->line, &tf->line_cap, tf->stream)) >= 0) {
		size_t len = (size_t)got;

		tf->line_no++;
		if (len > 0 && tf->line[len - 1] == '\n')
			tf->line[--len] = '\0';
		if (line_is_blank(tf->line, len))
			continue;
		if (tf->line[0] == '#') {
			if (parse_comment(tf, tf->line, len) < 0)
				return TRACEFILE_ERROR;
			continue;
		}
		status = parse_record(tf, tf->line, len, fields,
				      &tf->fields_cap);
		if (status == TRACEFILE_RECORD)
			*record = &tf->record;
		return status;
	}
	status = TRACEFILE_EOF;
	if (ferror(tf->stream)) {
		snprintf(tf->error, sizeof(tf->error), "read error: %s",
			 strerror(errno));
		status = TRACEFILE_ERROR;
	}
	return status;
}

int tracefile_defect_is_offset(enum tracefile_defect defect)
{
	return defect == TRACEFILE_DEFECT_OFFSET ||
	       defect == TRACEFILE_DEFECT_NEGATIVE ||
	       defect == TRACEFILE_DEFECT_UNALIGNED ||
	       defect == TRACEFILE_DEFECT_HUGE;
}

void tracefile_write_escaped(FILE *out, const char *bytes, size_t len,
			     const char *extra)
{
	size_t i;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)bytes[i];

		if (c <= 0x20 || c == '\\' || c == 0x7f ||
		    (extra && c && strchr(extra, c)))
			fprintf(out, "\\%03o", c);
		else
			fputc(c, out);
	}
}
