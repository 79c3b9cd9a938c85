/* SPDX-License-Identifier: GPL-2.0 */
/* openmetrics.c: cachestat --openmetrics, its totals served over HTTP in the
 * OpenMetrics text format. */
#ifndef PAGETRACE_OPENMETRICS_H
#define PAGETRACE_OPENMETRICS_H

#include <signal.h>
#include <stdint.h>
#include <linux/types.h>
#include "cache.h"

struct openmetrics;
struct cache_bpf;

/*
 * Listens on ADDR:PORT (":PORT": 127.0.0.1; "[::1]:PORT" for IPv6) into
 * *@server: 0, or -1 said on stderr as "TOOL: ADDR:PORT: why" (-2 when
 * ADDR:PORT is not an address: bad usage). Called before anything is
 * loaded, so that a port taken leaves nothing attached.
 */
int openmetrics_listen(const char *address, struct openmetrics **server);

/*
 * Answers scrapes until CLOCK_MONOTONIC reaches @until_ns (lib/clock.h) or
 * *@stop is set, with the totals as they are at each answer (counted since
 * the start; @cgroup, if not NULL, is their cgroup label). Never blocks on
 * one client: every connection is non-blocking, with a deadline.
 */
void openmetrics_serve(struct openmetrics *server, uint64_t until_ns, struct cache_bpf *skel,
		       const char *cgroup, volatile sig_atomic_t *stop);

/* Closes every connection and the listening socket. */
void openmetrics_close(struct openmetrics *server);

#endif
