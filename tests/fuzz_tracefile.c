/* libFuzzer target for the trace format v1 parser (replay/tracefile.c).
 * Built and run by `make -C replay fuzz-check`:
 *   clang -fsanitize=fuzzer,address,undefined tests/fuzz_tracefile.c \
 *         replay/tracefile.c
 * Every input is parsed to the end; the parser must neither crash nor
 * leak, and a record it returns must obey the format's rules. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracefile.h"

static void check_record(const struct tracefile *tf,
			 const struct tracefile_record *rec)
{
	/* Offsets of records handed out are page-aligned, and the path and
	 * extra columns are terminated where their lengths say. */
	if (rec->offset % tf->page_size != 0 || rec->path[rec->path_len] != '\0' ||
	    rec->line_no != tf->line_no)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct tracefile_record *rec;
	enum tracefile_status status;
	struct tracefile tf;
	FILE *in;

	/* fmemopen() refuses a zero-length buffer. */
	if (size == 0)
		return 0;
	in = fmemopen((void *)data, size, "r");
	if (!in)
		return 0;
	if (tracefile_init(&tf, in, "fuzz") == 0) {
		while ((status = tracefile_next(&tf, &rec)) != TRACEFILE_EOF &&
		       status != TRACEFILE_ERROR) {
			if (status == TRACEFILE_RECORD)
				check_record(&tf, rec);
		}
		tracefile_close(&tf);
	}
	fclose(in);
	return 0;
}
