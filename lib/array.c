/* See array.h. */
#include "array.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int array_reserve(void *items, size_t *cap, size_t need, size_t item_size)
{
	size_t new_cap = *cap ? *cap : 16;
	void *old, *grown;

	if (need <= *cap)
		return 0;
	while (new_cap < need) {
		if (new_cap > SIZE_MAX / 2 / item_size)
			return -1;
		new_cap *= 2;
	}
	if (new_cap > SIZE_MAX / item_size)
		return -1;
	/* ITEMS points to a T *, which has the representation of a void *
	 * on every platform this runs on; memcpy says so without aliasing. */
	memcpy(&old, items, sizeof(old));
	grown = realloc(old, new_cap * item_size);
	if (!grown)
		return -1;
	memcpy(items, &grown, sizeof(grown));
	*cap = new_cap;
	return 0;
}
