/* SPDX-License-Identifier: GPL-2.0 */
/* http_request.c: the HTTP/1.x request head the exporter (openmetrics.c)
 * reads, parsed from bytes alone (no socket), so that a fuzzer can feed it. */
#ifndef PAGETRACE_HTTP_REQUEST_H
#define PAGETRACE_HTTP_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

/* A request head (request line and headers) longer than this is refused. */
#define HTTP_HEAD_MAX 8192

enum http_parse {
	HTTP_INCOMPLETE,	/* no end of head yet: read more */
	HTTP_DONE,		/* *req holds the request */
	HTTP_BAD,		/* not an HTTP/1.x request head: 400 */
	HTTP_TOO_LARGE,		/* no end of head in HTTP_HEAD_MAX bytes: 431 */
};

enum http_method { HTTP_GET, HTTP_HEAD, HTTP_OTHER };

/* What the Accept header lets the answer be. */
enum http_format {
	HTTP_FORMAT_OPENMETRICS,	/* application/openmetrics-text; version=1.0.0 */
	HTTP_FORMAT_TEXT,		/* text/plain; version=0.0.4 (Prometheus' text) */
	HTTP_FORMAT_NONE,		/* neither: 406 */
};

struct http_request {
	enum http_method method;
	bool metrics;		/* the target is "/" or "/metrics", with or without a query */
	bool version_ok;	/* HTTP/1.0 or HTTP/1.1 (else 505) */
	bool keep_alive;	/* HTTP/1.1 without "Connection: close" */
	bool has_body;		/* Content-Length > 0 or Transfer-Encoding: not read */
	enum http_format format;
	size_t length;		/* bytes of the head, its empty line included */
};

/*
 * Parses the head at the start of @buf (@len bytes, not NUL-terminated).
 * Empty lines before the request line are skipped (RFC 9112, 2.2); a bare
 * LF ends a line as CRLF does. A malformed request line is HTTP_BAD as soon
 * as its end is there, before the rest of the head arrives.
 */
enum http_parse http_parse_request(const char *buf, size_t len, struct http_request *req);

/* The format an Accept header's value (@len bytes) asks for: the media
 * range most specific to each format gives its q; OpenMetrics wins a tie. */
enum http_format http_negotiate(const char *accept, size_t len);

#endif
