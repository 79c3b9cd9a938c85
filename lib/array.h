/* Growing arrays: the one place where the C tools double a capacity. */
#ifndef PAGETRACE_ARRAY_H
#define PAGETRACE_ARRAY_H

#include <stddef.h>

/* Makes room for NEED items of ITEM_SIZE bytes in the array whose pointer
 * is at ITEMS (a `T **`, realloc'd, NULL for an empty one) and whose
 * capacity is *CAP, doubling it (16 items at first). Returns 0, or -1 when
 * out of memory; the array is left as it was then. */
int array_reserve(void *items, size_t *cap, size_t need, size_t item_size);

#endif
