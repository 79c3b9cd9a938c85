// SPDX-License-Identifier: GPL-2.0
/* The C tools' stop signals (stop_signals.h). */
#include "stop_signals.h"

volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

void stop_on_signals(void)
{
	struct sigaction action = { .sa_handler = on_signal, .sa_flags = SA_RESTART };

	sigaction(SIGINT, &action, NULL);
	sigaction(SIGTERM, &action, NULL);
	signal(SIGPIPE, SIG_IGN);
}
