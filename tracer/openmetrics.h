/* SPDX-License-Identifier: GPL-2.0 */
/* openmetrics.c: cachestat --openmetrics, its totals served over HTTP in the
 * OpenMetrics text format. */
#ifndef PAGETRACE_OPENMETRICS_H
#define PAGETRACE_OPENMETRICS_H

#include <linux/types.h>
#include "cache.h"

/*
 * Listens on ADDR:PORT (":PORT": 127.0.0.1; "[::1]:PORT" for IPv6). The
 * listening socket, or -1 said on stderr as "TOOL: ADDR:PORT: why" (-2 when
 * ADDR:PORT is not an address: bad usage). Called
 * before anything is loaded, so that a port taken leaves nothing attached.
 */
int openmetrics_listen(const char *address);

struct cache_bpf;

/*
 * Waits up to @ms for scrapes on @fd, answering each with the totals as
 * they are at that moment (counted since the start; @cgroup, if not NULL,
 * is their cgroup label).
 */
void openmetrics_serve(int fd, int ms, struct cache_bpf *skel, const char *cgroup);

#endif
