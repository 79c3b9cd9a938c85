/* SIGINT and SIGTERM ask a C tool's main loop to stop: one flag, set by
 * the handler and read by the loop, the same in every tool. */
#ifndef PAGETRACE_STOP_SIGNALS_H
#define PAGETRACE_STOP_SIGNALS_H

#include <signal.h>

/* Set once SIGINT or SIGTERM came (after stop_on_signals()). */
extern volatile sig_atomic_t stop_requested;

/*
 * Installs the handler of SIGINT and SIGTERM, with SA_RESTART: a write
 * blocked on a full pipe when the signal comes finishes instead of failing
 * (the output would be cut mid-line and the tool exit 1); poll(),
 * epoll_wait() and clock_nanosleep() are never restarted, so a loop waiting
 * in them sees the flag at once. Ignores SIGPIPE: a closed stdout or
 * socket shows up as a write error.
 */
void stop_on_signals(void);

#endif
