/* libFuzzer target: the exporter's request-head parser and Accept
 * negotiation (tracer/http_request.c), as the server calls them: on the
 * bytes received so far. Besides surviving any input, the parser must keep
 * its promises: a head it accepts is no longer than what it was given nor
 * than HTTP_HEAD_MAX, the same head alone parses the same, every shorter
 * prefix of it is incomplete (never a head of its own, never refused), and
 * a refusal stands whatever follows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "http_request.h"

static void same(const struct http_request *a, const struct http_request *b)
{
	if (a->method != b->method || a->metrics != b->metrics || a->version_ok != b->version_ok ||
	    a->keep_alive != b->keep_alive || a->has_body != b->has_body ||
	    a->format != b->format || a->length != b->length)
		abort();
}

static void check_done(const char *buf, size_t len, const struct http_request *req)
{
	struct http_request again;

	if (req->length == 0 || req->length > len || req->length > HTTP_HEAD_MAX)
		abort();
	if (http_parse_request(buf, req->length, &again) != HTTP_DONE)
		abort();
	same(req, &again);
	/* the head less its last byte is not a head yet */
	if (http_parse_request(buf, req->length - 1, &again) != HTTP_INCOMPLETE)
		abort();
	if (req->has_body && req->keep_alive)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly @size bytes: a read past the end is ASan's. */
	char *buf = malloc(size ? size : 1);
	struct http_request req, half;
	enum http_parse parsed;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	parsed = http_parse_request(buf, size, &req);
	if (parsed == HTTP_DONE)
		check_done(buf, size, &req);
	if (parsed == HTTP_INCOMPLETE && size >= HTTP_HEAD_MAX)
		abort();
	/* a prefix of what is not refused is not refused */
	if (parsed != HTTP_BAD && size && http_parse_request(buf, size / 2, &half) == HTTP_BAD)
		abort();
	if (http_negotiate(buf, size) > HTTP_FORMAT_NONE)
		abort();
	free(buf);
	return 0;
}
