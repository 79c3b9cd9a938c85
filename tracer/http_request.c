// SPDX-License-Identifier: GPL-2.0
/*
 * The request head of HTTP/1.x (RFC 9112) as the exporter needs it: the
 * method, whether the target is the metrics, the version, whether the
 * connection stays open, whether a body follows, and the format the Accept
 * header asks for (RFC 9110, 12.5.1). Anything else a head may say is
 * checked for form and otherwise ignored. No allocation, no NUL expected:
 * every read is bounded by the length given.
 */
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include "http_request.h"

static bool is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

/* A field value's byte: HTAB, SP, VCHAR or obs-text. */
static bool is_value_char(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* @n bytes at @s equal @word, ASCII case ignored. */
static bool word_is(const char *s, size_t n, const char *word)
{
	return n == strlen(word) && !strncasecmp(s, word, n);
}

/* Index of the next '\n' at or after @pos, or @len. */
static size_t line_end(const char *buf, size_t pos, size_t len)
{
	const char *nl = memchr(buf + pos, '\n', len - pos);

	return nl ? (size_t)(nl - buf) : len;
}

/* Trims OWS from both ends of [*s, *s + *n). */
static void trim(const char **s, size_t *n)
{
	while (*n && is_ows(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && is_ows((*s)[*n - 1]))
		(*n)--;
}

/*
 * The request line, complete (@complete: its LF was seen, @n excludes the
 * line end) or the part of it there is so far: -1 as soon as it cannot be
 * one (so that garbage is refused before a whole head of it arrives).
 */
static int request_line(const char *s, size_t n, bool complete, struct http_request *req)
{
	static const char version[] = "HTTP/1.1";
	size_t i = 0, method, target;

	while (i < n && is_tchar(s[i]))
		i++;
	method = i;
	if (i < n && (s[i] != ' ' || method == 0))
		return -1;
	for (i++; i < n && s[i] > 0x20 && s[i] < 0x7f; i++)
		;
	target = i - method - 1;
	if (i < n && (s[i] != ' ' || target == 0))
		return -1;
	for (size_t v = 0; ++i < n; v++) {
		/* "HTTP/" DIGIT "." DIGIT */
		bool digit = s[i] >= '0' && s[i] <= '9';

		if (v >= sizeof(version) - 1 || (v == 5 || v == 7 ? !digit : s[i] != version[v]))
			return -1;
	}
	if (!complete)
		return 0;
	if (n != method + 1 + target + 1 + sizeof(version) - 1)
		return -1;
	/* A method is case-sensitive: "get" is not GET. */
	req->method = method == 3 && !memcmp(s, "GET", 3) ? HTTP_GET :
		      method == 4 && !memcmp(s, "HEAD", 4) ? HTTP_HEAD : HTTP_OTHER;
	s += method + 1;
	req->metrics = (target == 1 || (target > 1 && s[1] == '?')) ||
		       (target >= 8 && !memcmp(s, "/metrics", 8) && (target == 8 || s[8] == '?'));
	req->metrics = req->metrics && s[0] == '/';
	s += target + 1;
	req->version_ok = s[5] == '1' && (s[7] == '0' || s[7] == '1');
	req->keep_alive = s[5] == '1' && s[7] == '1';
	return 0;
}

/* What the headers said that matters here. */
struct head {
	bool close, accept_seen;
	int length_seen;
	unsigned long long length;
	struct quality { double q; int specificity; } om, text;
};

/* The Connection header's tokens. */
static void connection(const char *s, size_t n, struct head *h)
{
	while (n) {
		const char *comma = memchr(s, ',', n);
		size_t len = comma ? (size_t)(comma - s) : n;
		const char *tok = s;
		size_t tn = len;

		trim(&tok, &tn);
		if (word_is(tok, tn, "close"))
			h->close = true;
		s += len + (comma != NULL);
		n -= len + (comma != NULL);
	}
}

static int content_length(const char *s, size_t n, struct head *h)
{
	unsigned long long v = 0;

	if (!n || n > 18)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (h->length_seen && h->length != v)
		return -1;
	h->length_seen = 1;
	h->length = v;
	return 0;
}

static void accept_list(const char *s, size_t n, struct head *h);

/* One header line (@n bytes, no line end): -1 when it is not name: value. */
static int header(const char *s, size_t n, struct head *h)
{
	size_t name = 0;
	const char *value;
	size_t vn;

	while (name < n && is_tchar(s[name]))
		name++;
	if (name == 0 || name == n || s[name] != ':')
		return -1;
	value = s + name + 1;
	vn = n - name - 1;
	for (size_t i = 0; i < vn; i++)
		if (!is_value_char(value[i]))
			return -1;
	trim(&value, &vn);
	if (word_is(s, name, "connection"))
		connection(value, vn, h);
	else if (word_is(s, name, "content-length"))
		return content_length(value, vn, h);
	else if (word_is(s, name, "transfer-encoding"))
		h->length_seen = 1, h->length = 1;
	else if (word_is(s, name, "accept"))
		accept_list(value, vn, h);
	return 0;
}

/* Skips the empty lines before a request line; -1 on a lone CR. */
static int skip_empty_lines(const char *buf, size_t len, size_t *pos)
{
	while (*pos < len && (buf[*pos] == '\n' || buf[*pos] == '\r')) {
		if (buf[*pos] == '\r' && *pos + 1 < len && buf[*pos + 1] != '\n')
			return -1;
		if (buf[*pos] == '\r' && *pos + 1 == len)
			break;
		*pos += buf[*pos] == '\r' ? 2 : 1;
	}
	return 0;
}

static enum http_parse too_long(size_t len)
{
	return len >= HTTP_HEAD_MAX ? HTTP_TOO_LARGE : HTTP_INCOMPLETE;
}

static enum http_format decide(const struct head *h)
{
	if (!h->accept_seen)
		return HTTP_FORMAT_OPENMETRICS;
	if (h->om.specificity && h->om.q > 0 && h->om.q >= h->text.q)
		return HTTP_FORMAT_OPENMETRICS;
	if (h->text.specificity && h->text.q > 0)
		return HTTP_FORMAT_TEXT;
	return HTTP_FORMAT_NONE;
}

enum http_parse http_parse_request(const char *buf, size_t len, struct http_request *req)
{
	struct head h = {};
	size_t pos = 0, end, n;

	memset(req, 0, sizeof(*req));
	if (skip_empty_lines(buf, len, &pos))
		return HTTP_BAD;
	end = line_end(buf, pos, len);
	n = end - pos;
	if (n && buf[pos + n - 1] == '\r')	/* CRLF, or a CR whose LF is still to come */
		n--;
	if (request_line(buf + pos, n, end < len, req))
		return HTTP_BAD;
	if (end == len)
		return too_long(len);
	for (pos = end + 1;; pos = end + 1) {
		end = line_end(buf, pos, len);
		if (end == len)
			return too_long(len);
		n = end - pos;
		if (n && buf[end - 1] == '\r')
			n--;
		if (n == 0)
			break;
		if (header(buf + pos, n, &h))
			return HTTP_BAD;
	}
	if (end + 1 > HTTP_HEAD_MAX)
		return HTTP_TOO_LARGE;
	req->length = end + 1;
	req->has_body = h.length_seen && h.length > 0;
	req->keep_alive = req->keep_alive && !h.close && !req->has_body;
	req->format = decide(&h);
	return HTTP_DONE;
}

/* --- Accept ---------------------------------------------------------- */

/* A q value: "0", "1", "0.ddd", "1.000" (RFC 9110, 12.4.2); -1 if not one. */
static double qvalue(const char *s, size_t n)
{
	double q = 0, scale = 0.1;

	if (!n || (s[0] != '0' && s[0] != '1') || (n > 1 && (s[1] != '.' || n > 5)))
		return -1;
	for (size_t i = 2; i < n; i++, scale /= 10) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		q += (s[i] - '0') * scale;
	}
	q += s[0] - '0';
	return q > 1 ? -1 : q;
}

/* One media range's parameters: its q (default 1) and version (or none);
 * -1 when they are not ";" name "=" (token | quoted-string). */
static int parameters(const char *s, size_t n, double *q, const char **ver, size_t *ver_n)
{
	*q = 1;
	*ver = NULL;
	*ver_n = 0;
	while (n) {
		const char *semi = memchr(s, ';', n), *p = s, *eq;
		size_t len = semi ? (size_t)(semi - s) : n, pn = len;

		s += len + (semi != NULL);
		n -= len + (semi != NULL);
		trim(&p, &pn);
		eq = memchr(p, '=', pn);
		if (!eq || eq == p)
			return -1;
		size_t name_n = eq - p, val_n = pn - name_n - 1;
		const char *val = eq + 1;

		if (val_n >= 2 && val[0] == '"' && val[val_n - 1] == '"')
			val++, val_n -= 2;
		if (word_is(p, name_n, "q") && (*q = qvalue(val, val_n)) < 0)
			return -1;
		if (word_is(p, name_n, "version"))
			*ver = val, *ver_n = val_n;
	}
	return 0;
}

static void better(struct quality *have, int specificity, double q)
{
	if (specificity > have->specificity || (specificity == have->specificity && q > have->q)) {
		have->specificity = specificity;
		have->q = q;
	}
}

/* One media range ("type/subtype;params", trimmed) weighed for both formats. */
static void media_range(const char *s, size_t n, struct head *h)
{
	const char *semi = memchr(s, ';', n), *ver;
	size_t type_n = semi ? (size_t)(semi - s) : n, ver_n;
	const char *params = semi ? semi + 1 : s + n;
	size_t params_n = n - (size_t)(params - s);
	double q;
	bool om_version, text_version;

	trim(&s, &type_n);
	if (!type_n || parameters(params, params_n, &q, &ver, &ver_n))
		return;
	om_version = !ver || word_is(ver, ver_n, "1.0.0") || word_is(ver, ver_n, "0.0.1");
	text_version = !ver || word_is(ver, ver_n, "0.0.4");
	h->accept_seen = true;
	if (word_is(s, type_n, "*/*")) {
		better(&h->om, 1, q);
		better(&h->text, 1, q);
	} else if (word_is(s, type_n, "application/*")) {
		better(&h->om, 2, q);
	} else if (word_is(s, type_n, "text/*")) {
		better(&h->text, 2, q);
	} else if (word_is(s, type_n, "application/openmetrics-text") && om_version) {
		better(&h->om, 3, q);
	} else if (word_is(s, type_n, "text/plain") && text_version) {
		better(&h->text, 3, q);
	}
}

static void accept_list(const char *s, size_t n, struct head *h)
{
	while (n) {
		const char *comma = memchr(s, ',', n), *range = s;
		size_t len = comma ? (size_t)(comma - s) : n, rn = len;

		s += len + (comma != NULL);
		n -= len + (comma != NULL);
		trim(&range, &rn);
		if (rn)
			media_range(range, rn, h);
	}
}

enum http_format http_negotiate(const char *accept, size_t len)
{
	struct head h = {};

	accept_list(accept, len, &h);
	return decide(&h);
}
