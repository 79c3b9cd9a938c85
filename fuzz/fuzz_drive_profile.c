/* libFuzzer target: diskemu's reader of drive profile tables
 * (diskemu/drive_model.c, --profiles FILE): listing the table, and loading
 * the profile named by the first word of the input's first line (the
 * header's first column when it is a name), then checking it as
 * drive_model_init() does, which must refuse a profile its model cannot
 * run rather than divide by zero or loop; two reads are then served by
 * the model. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "drive_model.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct drive_profile p;
	struct drive_model model;
	struct memfile m;
	char name[DRIVE_NAME_MAX] = "hdd-7200";
	FILE *out = fopen("/dev/null", "w");

	if (!out)
		return 0;
	if (memfile_open(&m, data, size)) {
		fclose(out);
		return 0;
	}
	drive_profile_list(m.path, out);
	if (size > 1 && data[0] == '=') {	/* "=NAME\n...": look NAME up */
		size_t n = 0;

		while (n + 1 < sizeof(name) && n + 1 < size && data[n + 1] != '\n')
			n++;
		memcpy(name, data + 1, n);
		name[n] = '\0';
	}
	memset(&p, 0, sizeof(p));
	if (drive_profile_load(m.path, name, &p) == 0 && drive_model_init(&model, &p) == 0) {
		/* requests inside the drive, as diskemu makes them (an image
		 * larger than the profile's capacity is refused) */
		struct drive_state state = {0};

		drive_serve(&model, &state, 0.0, 0, fmin(4096, p.capacity));
		drive_serve(&model, &state, 0.01, p.capacity / 2, fmin(131072, p.capacity / 2));
	}
	memfile_close(&m);
	fclose(out);
	return 0;
}
