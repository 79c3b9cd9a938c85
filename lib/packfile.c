/* The C reader of the prefetch pack format (docs/pack-format.md). It
 * refuses a pack for the same reasons, in the same order and words, as
 * the Python reader (analysis/pagetrace/core/packfile.py): the whole pack
 * is checked (magic, version, NUL, checksum), then its lines, then its
 * header keys. */
#include "packfile.h"
#include "array.h"
#include "escape.h"
#include "size.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "# pagetrace-pack: "
#define CHECKSUM_KEY "# crc32: "

static const char *const header_keys[] = {
	"page-size", "created", "command", "runs", "read-ahead-kb",
};
#define N_HEADER_KEYS (sizeof(header_keys) / sizeof(header_keys[0]))

/* One line of the pack: START (not NUL-terminated), LEN bytes. */
struct span {
	char *start;
	size_t len;
};

struct reader {
	struct pack *pack;
	char *why;
	size_t why_len;
	struct span keys[N_HEADER_KEYS + 1]; /* + request-us */
};

uint32_t packfile_crc32(uint32_t crc, const void *bytes, size_t len)
{
	static uint32_t table[256];
	const unsigned char *p = bytes;
	size_t i;

	if (!table[1]) {
		for (uint32_t n = 0; n < 256; n++) {
			uint32_t c = n;

			for (int k = 0; k < 8; k++)
				c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
			table[n] = c;
		}
	}
	crc = ~crc;
	for (i = 0; i < len; i++)
		crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return ~crc;
}

__attribute__((format(printf, 2, 3)))
static int refuse(struct reader *rd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rd->why, rd->why_len, fmt, ap);
	va_end(ap);
	return -1;
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

static struct span strip(struct span s)
{
	while (s.len && is_space(s.start[0])) {
		s.start++;
		s.len--;
	}
	while (s.len && is_space(s.start[s.len - 1]))
		s.len--;
	return s;
}

static int span_is(struct span s, const char *text)
{
	return s.len == strlen(text) && memcmp(s.start, text, s.len) == 0;
}

static int starts_with(struct span s, const char *prefix)
{
	size_t n = strlen(prefix);

	return s.len >= n && memcmp(s.start, prefix, n) == 0;
}

/* An unsigned decimal integer filling S; 0, or -1 (not digits, overflow). */
static int span_u64(struct span s, uint64_t *value)
{
	return parse_u64(s.start, s.len, value) ? -1 : 0;
}

/* The first 64 bytes of S quoted as the Python reader quotes them (its
 * repr(): a backslash doubled), so that both say the same words. */
static const char *quoted(struct span s, char *buf, size_t len)
{
	size_t n = 0;

	buf[n++] = '\'';
	for (size_t i = 0; i < s.len && i < 64 && n + 3 < len; i++) {
		if (s.start[i] == '\\')
			buf[n++] = '\\';
		buf[n++] = s.start[i];
	}
	buf[n++] = '\'';
	buf[n] = '\0';
	return buf;
}

static int unsigned_field(struct reader *rd, struct span s, const char *what,
			  size_t line_no, uint64_t *value)
{
	char q[160];

	if (span_u64(s, value) == 0)
		return 0;
	return refuse(rd, "line %zu: %s is not an unsigned 64-bit integer: %s",
		      line_no, what, quoted(s, q, sizeof(q)));
}

/* Undoes the \ooo escapes of S in place and NUL-terminates it; 0, or -1
 * with the reason (after PREFIX) in WHY. */
static int unescape(struct reader *rd, struct span *s, const char *prefix)
{
	size_t len;

	switch (unescape_strict(s->start, s->len, &len)) {
	case -1:
		return refuse(rd, "%sbackslash not followed by three octal digits", prefix);
	case -2:
		return refuse(rd, "%sescape \\%.3s is above \\377", prefix,
			      s->start + len + 1);
	}
	s->len = len;
	return 0;
}

/* Splits S at single spaces into at most MAX fields; the field count, or
 * MAX + 1 when there are more. */
static size_t split(struct span s, struct span *fields, size_t max)
{
	size_t n = 0;
	char *p = s.start, *end = s.start + s.len;

	for (;;) {
		char *space = memchr(p, ' ', (size_t)(end - p));
		char *stop = space ? space : end;

		if (n == max)
			return max + 1;
		fields[n++] = (struct span){p, (size_t)(stop - p)};
		if (!space)
			return n;
		p = space + 1;
	}
}

static int parse_dev(struct span s, unsigned *major, unsigned *minor)
{
	char *colon = memchr(s.start, ':', s.len);
	uint64_t a, b;

	if (!colon ||
	    span_u64((struct span){s.start, (size_t)(colon - s.start)}, &a) ||
	    span_u64((struct span){colon + 1, s.len - (size_t)(colon - s.start) - 1}, &b) ||
	    a > 0xffffffffu || b > 0xffffffffu)
		return -1;
	*major = (unsigned)a;
	*minor = (unsigned)b;
	return 0;
}

static int parse_crc(struct span s, uint32_t *crc)
{
	uint32_t v = 0;

	if (s.len != 8)
		return -1;
	for (size_t i = 0; i < 8; i++) {
		char c = s.start[i];

		if (c >= '0' && c <= '9')
			v = v << 4 | (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (uint32_t)(c - 'a' + 10);
		else
			return -1;
	}
	*crc = v;
	return 0;
}

static int file_line(struct reader *rd, struct span line, size_t line_no)
{
	struct pack *p = rd->pack;
	struct span f[8];
	struct pack_file file;
	char prefix[48], q[160];

	if (split(line, f, 7) != 7)
		return refuse(rd, "line %zu: a file line has 6 fields after 'file': "
			      "dev ino size mtime_ns head_crc32 path", line_no);
	if (parse_dev(f[1], &file.major, &file.minor))
		return refuse(rd, "line %zu: device %s is not MAJ:MIN", line_no,
			      quoted(f[1], q, sizeof(q)));
	if (parse_crc(f[5], &file.head_crc32))
		return refuse(rd, "line %zu: head_crc32 is not 8 lower-case hex digits",
			      line_no);
	snprintf(prefix, sizeof(prefix), "line %zu: path: ", line_no);
	if (unescape(rd, &f[6], prefix))
		return -1;
	if (f[6].len == 0 || f[6].start[0] != '/')
		return refuse(rd, "line %zu: path is not absolute", line_no);
	if (unsigned_field(rd, f[2], "ino", line_no, &file.ino) ||
	    unsigned_field(rd, f[3], "size", line_no, &file.size) ||
	    unsigned_field(rd, f[4], "mtime_ns", line_no, &file.mtime_ns))
		return -1;
	file.path = f[6].start;
	file.path_len = f[6].len;
	if (array_reserve(&p->files, &p->files_cap, p->n_files + 1, sizeof(file)))
		return refuse(rd, "out of memory");
	p->files[p->n_files++] = file;
	return 0;
}

static int range_line(struct reader *rd, struct span line, size_t line_no)
{
	static const char *const what[] = {"file", "page", "pages", "ts_us"};
	struct pack *p = rd->pack;
	struct span f[6];
	uint64_t v[4];

	if (!starts_with(line, "range "))
		return refuse(rd, "line %zu: not a range line (range lines come last)",
			      line_no);
	if (split(line, f, 5) != 5)
		return refuse(rd, "line %zu: a range line has 4 fields after 'range': "
			      "file page pages ts_us", line_no);
	for (int i = 0; i < 4; i++)
		if (unsigned_field(rd, f[i + 1], what[i], line_no, &v[i]))
			return -1;
	if (v[0] >= p->n_files)
		return refuse(rd, "line %zu: file %llu is not listed (the pack lists %zu)",
			      line_no, (unsigned long long)v[0], p->n_files);
	if (v[2] == 0)
		return refuse(rd, "line %zu: a range of 0 pages", line_no);
	if (array_reserve(&p->ranges, &p->ranges_cap, p->n_ranges + 1,
			  sizeof(*p->ranges)))
		return refuse(rd, "out of memory");
	p->ranges[p->n_ranges++] = (struct pack_range){(size_t)v[0], v[1], v[2], v[3]};
	return 0;
}

/* A comment line: a header key's value is its first occurrence. */
static void comment_line(struct reader *rd, struct span line)
{
	struct span s = strip((struct span){line.start + 1, line.len - 1});
	char *colon = memchr(s.start, ':', s.len);
	struct span key, value;

	if (!colon)
		return;
	key = (struct span){s.start, (size_t)(colon - s.start)};
	value = strip((struct span){colon + 1, s.len - (size_t)(colon - s.start) - 1});
	for (size_t i = 0; i <= N_HEADER_KEYS; i++) {
		const char *name = i < N_HEADER_KEYS ? header_keys[i] : "request-us";

		if (span_is(key, name) && !rd->keys[i].start)
			rd->keys[i] = value;
	}
}

static int lines(struct reader *rd, char *body, size_t len)
{
	char *p = memchr(body, '\n', len) + 1, *end = body + len;
	size_t line_no = 2;
	int in_ranges = 0;

	for (; p < end; line_no++) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		struct span line = {p, (size_t)(nl - p)};

		p = nl + 1;
		if (in_ranges || starts_with(line, "range ")) {
			in_ranges = 1;
			if (range_line(rd, line, line_no))
				return -1;
		} else if (line.len && line.start[0] == '#') {
			comment_line(rd, line);
		} else if (starts_with(line, "file ") || span_is(line, "file")) {
			if (file_line(rd, line, line_no))
				return -1;
		} else {
			return refuse(rd, "line %zu: not a file, range or comment line",
				      line_no);
		}
	}
	return 0;
}

static int header_number(struct reader *rd, size_t key, size_t line_no,
			 uint64_t *value)
{
	return unsigned_field(rd, rd->keys[key], header_keys[key], line_no, value);
}

static int request_us(struct reader *rd)
{
	struct pack *p = rd->pack;
	struct span s = rd->keys[N_HEADER_KEYS];
	/* no request-us key: no span (NULL + 0 is undefined in C) */
	char *q = s.start, *end = s.start ? s.start + s.len : NULL;

	while (q && q < end) {
		struct pack_request_us r;
		char *item, *eq, shown[160];

		while (q < end && is_space(*q))
			q++;
		item = q;
		while (q < end && !is_space(*q))
			q++;
		if (item == q)
			break;
		eq = memchr(item, '=', (size_t)(q - item));
		if (!eq || parse_dev((struct span){item, (size_t)(eq - item)},
				     &r.major, &r.minor) ||
		    span_u64((struct span){eq + 1, (size_t)(q - eq - 1)}, &r.us))
			return refuse(rd, "request-us: %s is not MAJ:MIN=US",
				      quoted((struct span){item, (size_t)(q - item)}, shown,
					     sizeof(shown)));
		if (array_reserve(&p->request_us, &p->request_us_cap,
				  p->n_request_us + 1, sizeof(r)))
			return refuse(rd, "out of memory");
		p->request_us[p->n_request_us++] = r;
	}
	return 0;
}

static int header(struct reader *rd)
{
	struct pack *p = rd->pack;

	for (size_t i = 0; i < N_HEADER_KEYS; i++)
		if (!rd->keys[i].start)
			return refuse(rd, "header key %s is missing", header_keys[i]);
	if (header_number(rd, 0, 2, &p->page_size))
		return -1;
	if (p->page_size < 512 || (p->page_size & (p->page_size - 1)))
		return refuse(rd, "page-size %llu is not a power of two of at least 512",
			      (unsigned long long)p->page_size);
	if (unescape(rd, &rd->keys[2], "command: "))
		return -1;
	p->command = rd->keys[2].start;
	p->command_len = rd->keys[2].len;
	if (header_number(rd, 1, 3, &p->created) || header_number(rd, 3, 5, &p->runs))
		return -1;
	p->read_ahead_kb = rd->keys[4].start;
	p->read_ahead_kb[rd->keys[4].len] = '\0';
	return request_us(rd);
}

/* Magic, version, NUL bytes, checksum; the length of the body (every line
 * before the checksum line), or -1 / -2 (another version). */
static long check_whole(struct reader *rd, char *data, size_t len)
{
	char *nl, *last;
	struct span version, stated;
	char computed[9];

	if (!len)
		return refuse(rd, "empty file: not a pagetrace pack");
	if (len < strlen(MAGIC) || memcmp(data, MAGIC, strlen(MAGIC)))
		return refuse(rd, "not a pagetrace pack (the first line is not "
			      "'# pagetrace-pack: VERSION')");
	nl = memchr(data, '\n', len);
	version = strip((struct span){data + strlen(MAGIC),
				      (size_t)((nl ? nl : data + len) - data) - strlen(MAGIC)});
	if (!span_is(version, "1")) {
		refuse(rd, "pack format version %.*s; this reader knows version %d: "
		       "record the pack again with this pagetrace",
		       (int)(version.len < 64 ? version.len : 64), version.start,
		       PACKFILE_VERSION);
		return -2;
	}
	if (memchr(data, '\0', len))
		return refuse(rd, "binary data (a NUL byte): the pack is corrupt");
	/* The last line starts after the last newline before the final byte. */
	last = data;
	for (size_t i = len - 1; i-- > 0;)
		if (data[i] == '\n') {
			last = data + i + 1;
			break;
		}
	if (!starts_with((struct span){last, (size_t)(data + len - last)}, CHECKSUM_KEY) ||
	    data[len - 1] != '\n')
		return refuse(rd, "no '# crc32:' line at the end: the pack is "
			      "truncated or corrupt");
	stated = strip((struct span){last + strlen(CHECKSUM_KEY),
				     (size_t)(data + len - last) - strlen(CHECKSUM_KEY)});
	snprintf(computed, sizeof(computed), "%08x",
		 packfile_crc32(0, data, (size_t)(last - data)));
	if (!span_is(stated, computed))
		return refuse(rd, "checksum mismatch (crc32 %.*s in the pack, %s of its "
			      "contents): the pack is corrupt",
			      (int)(stated.len < 16 ? stated.len : 16), stated.start,
			      computed);
	return (long)(last - data);
}

/* O_NONBLOCK: a FIFO named as the pack must not hang the launch (opening
 * it would wait for a writer); anything but a regular file is refused. */
static int read_all(const char *path, char **data, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	size_t got = 0;
	int err = 0;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0)
		err = errno;
	else if (!S_ISREG(st.st_mode))
		err = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
	else if (!(*data = malloc((size_t)st.st_size + 1)))
		err = ENOMEM;
	if (err) {
		close(fd);
		errno = err;
		return -1;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, *data + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	*len = got;
	return 0;
}

void packfile_free(struct pack *pack)
{
	free(pack->files);
	free(pack->ranges);
	free(pack->request_us);
	free(pack->data);
	memset(pack, 0, sizeof(*pack));
}

enum packfile_status packfile_read(const char *path, struct pack *pack,
				   char *why, size_t why_len)
{
	struct reader rd = {.pack = pack, .why = why, .why_len = why_len};
	size_t len;
	long body;

	memset(pack, 0, sizeof(*pack));
	if (read_all(path, &pack->data, &len)) {
		snprintf(why, why_len, "%s", errno == EINVAL ? "not a regular file" :
			 strerror(errno));
		return PACKFILE_UNREADABLE;
	}
	body = check_whole(&rd, pack->data, len);
	if (body < 0 || lines(&rd, pack->data, (size_t)body) || header(&rd)) {
		packfile_free(pack);
		return body == -2 ? PACKFILE_VERSION_UNKNOWN : PACKFILE_REFUSED;
	}
	return PACKFILE_OK;
}
