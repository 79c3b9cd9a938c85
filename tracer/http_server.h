/* SPDX-License-Identifier: GPL-2.0 */
/* http_server.c: the exporter's HTTP/1.1 connections (openmetrics.c gives
 * it the listening socket and the body of a scrape). */
#ifndef PAGETRACE_HTTP_SERVER_H
#define PAGETRACE_HTTP_SERVER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "http_request.h"

struct http_server;

/* The body of a scrape in @format into *@body (malloc'd, *@size bytes): 0,
 * or -1 when there is none to give (500). */
typedef int (*http_body_fn)(void *ctx, enum http_format format, char **body, size_t *size);

/* A server on @listener (a listening, non-blocking socket: the server
 * closes it), answering GET and HEAD of "/" and "/metrics" with @body's;
 * NULL when out of memory. */
struct http_server *http_server_new(int listener, http_body_fn body, void *ctx);

/* Serves until CLOCK_MONOTONIC reaches @until_ns (lib/clock.h) or *@stop
 * is set; *@stop is seen within 100 ms. */
void http_server_serve(struct http_server *server, uint64_t until_ns,
		       volatile sig_atomic_t *stop);

/* Closes every connection and the listening socket. */
void http_server_free(struct http_server *server);

#endif
