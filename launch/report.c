/* --report FILE: what the launch decided, as JSON, with the keys of the
 * Python planner's report (pagetrace/tools/launch.py), so that a test or
 * a service reads either the same way. */
#include "launch.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void json_text(FILE *out, const char *text)
{
	if (text)
		json_string(out, text, strlen(text));
	else
		fputs("null", out);
}

static void skipped_object(FILE *out, const struct pack *pack,
			   const struct skipped *s)
{
	int first_reason = 1;

	fputc('{', out);
	for (size_t i = 0; s && i < s->n_files; i++) {
		const char *reason = s->reason[i];
		size_t k;
		int first = 1;

		if (!reason)
			continue;
		for (k = 0; k < i && !(s->reason[k] && !strcmp(s->reason[k], reason)); k++)
			;
		if (k < i)
			continue; /* listed at its first file */
		fputs(first_reason ? "" : ", ", out);
		first_reason = 0;
		json_text(out, reason);
		fputs(": [", out);
		for (k = i; k < s->n_files; k++) {
			if (!s->reason[k] || strcmp(s->reason[k], reason))
				continue;
			fputs(first ? "" : ", ", out);
			first = 0;
			json_string(out, pack->files[k].path, pack->files[k].path_len);
		}
		fputc(']', out);
	}
	fputc('}', out);
}

/* The requests the prefetch makes of the files kept so far (the content
 * check, after the report, may drop more) and --batch's settings. */
static void requests_keys(FILE *out, const struct report *r)
{
	struct request *q = malloc((r->data->n_ranges + 1) * sizeof(*q));
	uint64_t filled;
	size_t n;

	if (!q || !r->skipped || !r->skipped->reason) {
		free(q);
		return;
	}
	n = plan_requests(r->data, r->skipped, r->batch, q, &filled);
	fprintf(out, ", \"batch\": %llu, \"gap_pages\": %llu, \"requests\": %zu"
		", \"filled_pages\": %llu", (unsigned long long)r->batch->bytes,
		(unsigned long long)r->batch->gap, n, (unsigned long long)filled);
	free(q);
}

int write_report(const char *path, const struct report *r)
{
	FILE *out = fopen(path, "we");

	if (!out)
		return -1;
	fputs("{\"pack\": ", out);
	json_text(out, r->pack);
	fputs(", \"mode\": ", out);
	json_text(out, r->mode);
	fprintf(out, ", \"files\": %zu, \"prefetched_files\": %zu, \"pages\": null",
		r->data ? r->data->n_files : 0,
		r->skipped && r->skipped->reason ? count_kept(r->skipped) : 0);
	fputs(", \"skipped\": ", out);
	skipped_object(out, r->data, r->skipped && r->skipped->reason ? r->skipped : NULL);
	fputs(", \"problem\": ", out);
	json_text(out, r->problem);
	if (r->device) {
		fputs(", \"device\": ", out);
		json_text(out, r->device);
	}
	if (r->window)
		fprintf(out, ", \"window\": %llu", (unsigned long long)r->window);
	if (r->window && r->data)
		requests_keys(out, r);
	fprintf(out, ", \"launch_s\": %.6f}\n", r->launch_s);
	return fclose(out);
}
