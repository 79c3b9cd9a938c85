/* libFuzzer target: replay's reader of --throttle riops=N[,rbps=SIZE] and
 * of --device-profile NAME (replay/throttle_input.c). A limit it accepts
 * has riops >= 1 and names no profile; a refusal says why; a profile it
 * finds is one of the names it lists. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "throttle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	struct throttle_limits lim;
	const char *why = NULL;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (throttle_parse(text, &lim, &why) == 0) {
		if (lim.riops == 0 || lim.profile)
			abort();
	} else if (!why || !why[0]) {
		abort();
	}
	if (throttle_profile(text, &lim) == 0 &&
	    (!strstr(throttle_profile_names(), text) || lim.riops == 0 || !text[0]))
		abort();
	free(text);
	return 0;
}
