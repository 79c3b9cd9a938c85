/* --first-reads: each traced page once, at its first read record. A page
 * read again in a trace was evicted in between (memory pressure, or here
 * DAMON's pageout of page cache untouched for some seconds), which depends
 * on how long that run took: a slow, traced start re-reads more than an
 * untraced one. See docs/lab/case-study-firefox.md. */
#include "replay.h"

#include <stdlib.h>

/* By file and offset, then by position in the trace: the first read of a
 * page first. */
static int compare_page_at(const void *pa, const void *pb, void *arg)
{
	const struct page *pages = arg;
	size_t a = *(const size_t *)pa, b = *(const size_t *)pb;

	if (pages[a].file != pages[b].file)
		return pages[a].file < pages[b].file ? -1 : 1;
	if (pages[a].offset != pages[b].offset)
		return pages[a].offset < pages[b].offset ? -1 : 1;
	return a < b ? -1 : a > b;
}

int keep_first_reads(struct replay *r)
{
	size_t *by_page = malloc((r->n_pages + 1) * sizeof(*by_page));
	unsigned char *repeat = calloc(r->n_pages + 1, 1);
	size_t i, kept = 0;

	if (!by_page || !repeat) {
		free(by_page);
		free(repeat);
		return -1;
	}
	for (i = 0; i < r->n_pages; i++)
		by_page[i] = i;
	qsort_r(by_page, r->n_pages, sizeof(*by_page), compare_page_at,
		r->pages);
	for (i = 1; i < r->n_pages; i++) {
		const struct page *a = &r->pages[by_page[i - 1]];
		const struct page *b = &r->pages[by_page[i]];

		if (a->file == b->file && a->offset == b->offset)
			repeat[by_page[i]] = 1;
	}
	for (i = 0; i < r->n_pages; i++)
		if (!repeat[i])
			r->pages[kept++] = r->pages[i];
	r->repeated_reads = r->n_pages - kept;
	r->n_pages = kept;
	free(by_page);
	free(repeat);
	return 0;
}
