/* libFuzzer target for the trace format parser (lib/tracefile.c),
 * versions 1 and 2.
 * Built and run by `make -C replay fuzz-check`:
 *   clang -fsanitize=fuzzer,address,undefined tests/fuzz_tracefile.c \
 *         lib/tracefile.c lib/escape.c lib/array.c
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
	 * extra columns are terminated where their lengths say; a version 1
	 * record is a read, a version 2 one has a declared kind. */
	if (rec->offset % tf->page_size != 0 || rec->path[rec->path_len] != '\0' ||
	    rec->line_no != tf->line_no || rec->kind >= TRACEFILE_KIND_COUNT)
		abort();
	if (tf->version == 1 && rec->kind != TRACEFILE_KIND_READ)
		abort();
	if (tf->version == 2 && (rec->n_extra == 0 ||
				 !(tf->kinds_declared & (1u << rec->kind)) ||
				 strcmp(rec->extra[0],
					tracefile_kind_name(rec->kind)) != 0))
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
