/* packfile-dump: prints what the C pack reader (lib/packfile.c) makes of a
 * pack, as JSON laid out as the Python reader's packfile.as_json, so that
 * tests hold both readers to samples/pack/NAME.expect.json:
 *
 *   packfile-dump PACK
 *
 * {"pack": {...}} and exit 0, or {"refused": REASON} and exit 1 (the
 * reason without the path); exit 2 on a usage error. */
#include "json.h"
#include "packfile.h"

#include <stdio.h>
#include <string.h>

static void dump_files(const struct pack *p)
{
	for (size_t i = 0; i < p->n_files; i++) {
		const struct pack_file *f = &p->files[i];

		printf("%s{\"path\": ", i ? ", " : "");
		json_string(stdout, f->path, f->path_len);
		printf(", \"dev\": \"%u:%u\", \"ino\": %llu, \"size\": %llu, "
		       "\"mtime_ns\": %llu, \"head_crc32\": %u}", f->major, f->minor,
		       (unsigned long long)f->ino, (unsigned long long)f->size,
		       (unsigned long long)f->mtime_ns, (unsigned)f->head_crc32);
	}
}

static void dump(const struct pack *p)
{
	const char *ra = p->read_ahead_kb;

	printf("{\"pack\": {\"version\": %d, \"page_size\": %llu, \"created\": %llu, "
	       "\"command\": ", PACKFILE_VERSION, (unsigned long long)p->page_size,
	       (unsigned long long)p->created);
	json_string(stdout, p->command, p->command_len);
	printf(", \"runs\": %llu, \"read_ahead_kb\": ", (unsigned long long)p->runs);
	if (*ra && strspn(ra, "0123456789") == strlen(ra))
		fputs(ra, stdout);
	else
		json_string(stdout, ra, strlen(ra));
	fputs(", \"files\": [", stdout);
	dump_files(p);
	fputs("], \"ranges\": [", stdout);
	for (size_t i = 0; i < p->n_ranges; i++)
		printf("%s[%zu, %llu, %llu, %llu]", i ? ", " : "", p->ranges[i].file,
		       (unsigned long long)p->ranges[i].page,
		       (unsigned long long)p->ranges[i].pages,
		       (unsigned long long)p->ranges[i].ts_us);
	fputs("], \"request_us\": {", stdout);
	for (size_t i = 0; i < p->n_request_us; i++)
		printf("%s\"%u:%u\": %llu", i ? ", " : "", p->request_us[i].major,
		       p->request_us[i].minor, (unsigned long long)p->request_us[i].us);
	fputs("}}}\n", stdout);
}

int main(int argc, char **argv)
{
	struct pack pack;
	char why[512];

	if (argc != 2) {
		fprintf(stderr, "usage: packfile-dump PACK\n");
		return 2;
	}
	if (packfile_read(argv[1], &pack, why, sizeof(why)) != PACKFILE_OK) {
		fputs("{\"refused\": ", stdout);
		json_string(stdout, why, strlen(why));
		fputs("}\n", stdout);
		return 1;
	}
	dump(&pack);
	packfile_free(&pack);
	return 0;
}
