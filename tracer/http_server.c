// SPDX-License-Identifier: GPL-2.0
/*
 * The exporter's HTTP/1.1 server, run from the interval loop's thread
 * between samples: GET and HEAD of "/" and "/metrics" (any other path is
 * 404, any other method 405), keep-alive and pipelining for HTTP/1.1.
 *
 * No client can stop it or hold it up: every socket is non-blocking and
 * written with MSG_NOSIGNAL (a client gone is an error, never SIGPIPE);
 * each connection has its state and a deadline (its request head, the
 * answer taken, a keep-alive wait, the lingering close); at most HS_CONNS
 * are open, a new one closing the one idle longest; a head is parsed by
 * http_request.c, bounded by HTTP_HEAD_MAX bytes. Each turn of the loop
 * does a bounded amount of work, so that the samples keep their time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "clock.h"
#include "http_server.h"

#define HS_CONNS 128			/* connections open at once */
#define HS_ACCEPTS 32			/* accepted per turn of the loop */
#define HS_REQUEST_MS 10000		/* a request head arrives within */
#define HS_KEEPALIVE_MS 30000		/* a kept connection waits for the next one */
#define HS_SEND_MS 10000		/* an answer is taken within */
#define HS_LINGER_MS 2000		/* after the last answer, what the client still sends */
#define HS_TURN_MS 100			/* the longest poll: *stop is seen within it */
#define MS 1000000ull

enum conn_state { CONN_FREE, CONN_READING, CONN_WRITING, CONN_LINGERING };

struct conn {
	int fd;
	enum conn_state state;
	bool close_after;	/* after this answer */
	size_t in_len;
	char *out;
	size_t out_len, out_sent;
	uint64_t deadline_ns;
	uint64_t since_ns;	/* accepted or last answered: the oldest idle goes first */
	char in[HTTP_HEAD_MAX];
};

struct http_server {
	int listener;
	uint64_t listener_paused_until;	/* after EMFILE */
	http_body_fn body;
	void *ctx;
	struct conn conns[HS_CONNS];
	struct pollfd fds[HS_CONNS + 1];
	struct conn *polled[HS_CONNS + 1];	/* fds[i]'s connection, NULL: the listener */
};

static void conn_close(struct conn *c)
{
	close(c->fd);
	free(c->out);
	c->out = NULL;
	c->fd = -1;
	c->state = CONN_FREE;
}

/* Half-closes @c and reads what the client still sends, so that closing
 * with unread bytes (an RST) does not destroy the answer in flight. */
static void conn_linger(struct conn *c)
{
	shutdown(c->fd, SHUT_WR);
	c->state = CONN_LINGERING;
	c->deadline_ns = monotonic_ns() + HS_LINGER_MS * MS;
}

static const char *reason_phrase(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 406: return "Not Acceptable";
	case 408: return "Request Timeout";
	case 431: return "Request Header Fields Too Large";
	case 505: return "HTTP Version Not Supported";
	default: return "Internal Server Error";
	}
}

static const char *error_body(int status)
{
	switch (status) {
	case 404: return "not found: the metrics are at /metrics\n";
	case 405: return "method not allowed: GET or HEAD\n";
	case 406: return "not acceptable: application/openmetrics-text or text/plain\n";
	case 408: return "request timeout: no whole request head in time\n";
	case 431: return "request head too large\n";
	case 505: return "HTTP/1.0 and HTTP/1.1 only\n";
	case 400: return "bad request\n";
	default: return "cannot read the counters\n";
	}
}

/* The answer into @c->out: status line, headers, and the body unless @head_only. */
static void conn_answer(struct conn *c, int status, bool om_format, char *body, size_t size,
			bool head_only)
{
	const char *type = status != 200 ? "text/plain; charset=utf-8" : om_format ?
		"application/openmetrics-text; version=1.0.0; charset=utf-8" :
		"text/plain; version=0.0.4; charset=utf-8";
	char head[512];
	int n;

	if (!body) {
		body = strdup(error_body(status));
		size = body ? strlen(body) : 0;
	}
	n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
		     "Content-Length: %zu\r\n%s%s%s\r\n", status, reason_phrase(status), type, size,
		     status == 200 ? "Vary: Accept\r\n" : "",
		     status == 405 ? "Allow: GET, HEAD\r\n" : "",
		     c->close_after ? "Connection: close\r\n" : "");
	c->out_len = (size_t)n + (head_only ? 0 : size);
	c->out = malloc(c->out_len);
	if (c->out) {
		memcpy(c->out, head, n);
		if (!head_only)
			memcpy(c->out + n, body, size);
	}
	free(body);
	c->out_sent = 0;
	c->state = CONN_WRITING;
	c->deadline_ns = monotonic_ns() + HS_SEND_MS * MS;
}

static void conn_send(struct http_server *s, struct conn *c);

/* A whole head in @c->in, or an error: its answer, then the bytes after it. */
static void conn_request(struct http_server *s, struct conn *c)
{
	struct http_request req;
	enum http_parse parsed = http_parse_request(c->in, c->in_len, &req);
	int status = 200;
	char *body = NULL;
	size_t size = 0;

	if (parsed == HTTP_INCOMPLETE)
		return;
	c->close_after = parsed != HTTP_DONE || !req.keep_alive;
	if (parsed != HTTP_DONE)
		status = parsed == HTTP_TOO_LARGE ? 431 : 400;
	else if (!req.version_ok)
		status = 505;
	else if (req.method == HTTP_OTHER)
		status = 405;
	else if (!req.metrics)
		status = 404;
	else if (req.format == HTTP_FORMAT_NONE)
		status = 406;
	else if (s->body(s->ctx, req.format, &body, &size))
		status = 500, c->close_after = true;
	if (parsed == HTTP_DONE && !c->close_after) {
		memmove(c->in, c->in + req.length, c->in_len - req.length);
		c->in_len -= req.length;
	} else {
		c->in_len = 0;
	}
	conn_answer(c, status, req.format == HTTP_FORMAT_OPENMETRICS, body, size,
		    parsed == HTTP_DONE && req.method == HTTP_HEAD);
	conn_send(s, c);
}

/* As much of the answer as the socket takes; then the next request, a wait
 * for one, or the close. */
static void conn_send(struct http_server *s, struct conn *c)
{
	while (c->out && c->out_sent < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;		/* POLLOUT brings us back */
		if (n <= 0)
			return conn_close(c);
		c->out_sent += n;
	}
	if (!c->out)
		return conn_close(c);	/* out of memory: no answer to give */
	free(c->out);
	c->out = NULL;
	if (c->close_after)
		return conn_linger(c);
	c->state = CONN_READING;
	c->since_ns = monotonic_ns();
	c->deadline_ns = c->since_ns + HS_KEEPALIVE_MS * MS;
	if (c->in_len)		/* pipelined */
		conn_request(s, c);
}

static void conn_read(struct http_server *s, struct conn *c)
{
	char discard[4096];
	bool lingering = c->state == CONN_LINGERING;
	char *to = lingering ? discard : c->in + c->in_len;
	size_t room = lingering ? sizeof(discard) : sizeof(c->in) - c->in_len;
	ssize_t n = recv(c->fd, to, room, MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0)
		return conn_close(c);	/* gone, or reset */
	if (lingering)
		return;
	if (c->in_len == 0) {	/* a head's first bytes: the whole head follows in time */
		uint64_t head_by = monotonic_ns() + HS_REQUEST_MS * MS;

		if (head_by < c->deadline_ns)
			c->deadline_ns = head_by;
	}
	c->in_len += n;
	conn_request(s, c);
}

/* A free slot, else the one idle longest (reading or lingering) closed for it. */
static struct conn *free_slot(struct http_server *s)
{
	struct conn *oldest = NULL;

	for (int i = 0; i < HS_CONNS; i++) {
		struct conn *c = &s->conns[i];

		if (c->state == CONN_FREE)
			return c;
		if (c->state != CONN_WRITING && (!oldest || c->since_ns < oldest->since_ns))
			oldest = c;
	}
	if (oldest)
		conn_close(oldest);
	return oldest;
}

static void accept_clients(struct http_server *s, uint64_t now)
{
	int one = 1;

	for (int i = 0; i < HS_ACCEPTS; i++) {
		int fd = accept4(s->listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct conn *c;

		if (fd < 0) {
			/* out of descriptors: the backlog waits a turn */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				s->listener_paused_until = now + HS_TURN_MS * MS;
			return;
		}
		c = free_slot(s);
		if (!c) {
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		*c = (struct conn){ .fd = fd, .state = CONN_READING, .since_ns = now,
				    .deadline_ns = now + HS_REQUEST_MS * MS };
	}
}

/* Connections past their deadline: a partial head gets 408, the rest close. */
static void expire(struct http_server *s, uint64_t now)
{
	for (int i = 0; i < HS_CONNS; i++) {
		struct conn *c = &s->conns[i];

		if (c->state == CONN_FREE || now < c->deadline_ns)
			continue;
		if (c->state == CONN_READING && c->in_len) {
			c->close_after = true;
			c->in_len = 0;
			conn_answer(c, 408, false, NULL, 0, false);
			conn_send(s, c);
		} else {
			conn_close(c);
		}
	}
}

/* The poll set and its timeout: the nearest deadline, @until_ns, a turn. */
static int poll_set(struct http_server *s, uint64_t now, uint64_t until_ns, int *timeout)
{
	uint64_t next = until_ns < now + HS_TURN_MS * MS ? until_ns :
			now + HS_TURN_MS * MS;
	int n = 0;

	if (now >= s->listener_paused_until) {
		s->polled[n] = NULL;
		s->fds[n++] = (struct pollfd){ .fd = s->listener, .events = POLLIN };
	}
	for (int i = 0; i < HS_CONNS; i++) {
		struct conn *c = &s->conns[i];

		if (c->state == CONN_FREE)
			continue;
		s->polled[n] = c;
		s->fds[n++] = (struct pollfd){ .fd = c->fd,
			.events = c->state == CONN_WRITING ? POLLOUT : POLLIN };
		if (c->deadline_ns < next)
			next = c->deadline_ns;
	}
	*timeout = next > now ? (int)((next - now + 999999) / 1000000) : 0;
	return n;
}

struct http_server *http_server_new(int listener, http_body_fn body, void *ctx)
{
	struct http_server *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->listener = listener;
	s->body = body;
	s->ctx = ctx;
	for (int i = 0; i < HS_CONNS; i++)
		s->conns[i].fd = -1;
	return s;
}

void http_server_serve(struct http_server *s, uint64_t until_ns, volatile sig_atomic_t *stop)
{
	uint64_t now;

	while (!*stop && (now = monotonic_ns()) < until_ns) {
		int timeout, n = poll_set(s, now, until_ns, &timeout);

		if (poll(s->fds, n, timeout) < 0 && errno != EINTR)
			return (void)usleep(HS_TURN_MS * 1000);
		now = monotonic_ns();
		for (int i = 0; i < n; i++) {
			struct conn *c = s->polled[i];

			if (!s->fds[i].revents)
				continue;
			if (!c) {
				accept_clients(s, now);
				continue;
			}
			/* closed, or closed for a newer one, this turn */
			if (c->state == CONN_FREE || c->fd != s->fds[i].fd)
				continue;
			if (c->state == CONN_WRITING)
				conn_send(s, c);
			else
				conn_read(s, c);
		}
		expire(s, monotonic_ns());
	}
}

void http_server_free(struct http_server *s)
{
	if (!s)
		return;
	for (int i = 0; i < HS_CONNS; i++)
		if (s->conns[i].state != CONN_FREE)
			conn_close(&s->conns[i]);
	close(s->listener);
	free(s);
}
