/* libFuzzer target: the C pack reader (lib/packfile.c), which launch
 * trusts with the files it opens. Each input is read twice: as it is, and
 * with its last line replaced by the right "# crc32:" of what precedes it,
 * so that mutations reach the lines and the header behind the checksum. A
 * pack read must hold what the format promises: its ranges name files it
 * has, each file's path is absolute, and the reason is empty only on
 * success. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "packfile.h"
#include "memfile.h"

static void check(const struct pack *pack)
{
	for (size_t i = 0; i < pack->n_ranges; i++)
		if (pack->ranges[i].file >= pack->n_files || pack->ranges[i].pages == 0)
			abort();
	for (size_t i = 0; i < pack->n_files; i++)
		if (pack->files[i].path_len == 0 || pack->files[i].path[0] != '/' ||
		    pack->files[i].path[pack->files[i].path_len] != '\0')
			abort();
	if (pack->page_size == 0 || !pack->command || !pack->read_ahead_kb)
		abort();
}

static void read_one(const void *data, size_t size)
{
	struct memfile m;
	struct pack pack;
	char why[256];
	enum packfile_status status;

	if (memfile_open(&m, data, size))
		return;
	why[0] = '\0';
	status = packfile_read(m.path, &pack, why, sizeof(why));
	memfile_close(&m);
	if (status == PACKFILE_OK) {
		check(&pack);
		packfile_free(&pack);
	} else if (!why[0] || status == PACKFILE_UNREADABLE) {
		abort();	/* a refusal says why; a memfd is always readable */
	}
}

/* @data with its last line (or nothing, if it has none) replaced by the
 * checksum of what precedes it. */
static void read_checksummed(const uint8_t *data, size_t size)
{
	size_t body = size;
	char *fixed;

	while (body > 0 && data[body - 1] == '\n')
		body--;
	while (body > 0 && data[body - 1] != '\n')
		body--;
	fixed = malloc(body + 32);
	if (!fixed)
		return;
	memcpy(fixed, data, body);
	body += (size_t)sprintf(fixed + body, "# crc32: %08x\n", packfile_crc32(0, data, body));
	read_one(fixed, body);
	free(fixed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	read_one(data, size);
	read_checksummed(data, size);
	return 0;
}
