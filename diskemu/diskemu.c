/* diskemu's main: options, the profile, the model's prediction, then the
 * device's life (device.c). */
#include "diskemu.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errmsg.h"
#include "json.h"

/* The profile table: --profiles, else profiles.tsv beside the program (the
 * source tree), else where `make install` puts it. */
static const char *profiles_file(const struct diskemu_options *o)
{
	static char path[PATH_MAX + 64];
	char exe[PATH_MAX], *dir;
	ssize_t n;

	if (o->profiles)
		return o->profiles;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n < 0)
		return "profiles.tsv";
	exe[n] = '\0';
	dir = dirname(exe);
	snprintf(path, sizeof(path), "%s/profiles.tsv", dir);
	if (access(path, R_OK) == 0)
		return path;
	snprintf(path, sizeof(path), "%s/../share/pagetrace/diskemu-profiles.tsv",
		 dir);
	return path;
}

static int open_image(struct diskemu *d)
{
	struct stat st;

	d->image_fd = open(d->opt.image, O_RDONLY | O_CLOEXEC);
	if (d->image_fd < 0 || fstat(d->image_fd, &st) < 0) {
		errmsg(d->opt.image, "%s", errmsg_strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
		errmsg(d->opt.image, "not a regular file");
		return -1;
	}
	d->image_size = (uint64_t)st.st_size;
	if (d->image_size == 0 || d->image_size % 512) {
		errmsg(d->opt.image, "size %llu is not a positive multiple of "
		       "512 bytes", (unsigned long long)d->image_size);
		return -1;
	}
	if ((double)d->image_size > d->model.p.capacity) {
		errmsg(d->opt.image, "larger than the %s profile's %.0f bytes",
		       d->model.p.name, d->model.p.capacity);
		return -1;
	}
	return 0;
}

void diskemu_print_prediction(const struct diskemu *d)
{
	const struct drive_model *m = &d->model;
	double span = (double)d->image_size;
	double seek = drive_mean_seek_s(m, span);
	double iops = drive_random_iops(m, span, 4096);
	double first = drive_rate_bps(m, 0), last = drive_rate_bps(m, span - 1);

	if (d->opt.json) {
		fputs("{\"profile\":", stdout);
		json_puts(stdout, m->p.name);
		printf(",\"span_bytes\":%llu,"
		       "\"boundary_ms\":%.4f,\"mean_seek_ms\":%.4f,"
		       "\"rotation_ms\":%.4f,\"random_4k_iops\":%.3f,"
		       "\"first_zone_bps\":%.0f,\"last_zone_bps\":%.0f}\n",
		       (unsigned long long)d->image_size,
		       m->boundary_ms, seek * 1e3, m->rev_s / 2 * 1e3, iops,
		       first, last);
		return;
	}
	printf("profile %s over %llu bytes (%.4f of the disk)\n", m->p.name,
	       (unsigned long long)d->image_size, span / m->p.capacity);
	printf("seek curve boundary %.3f ms at %.2f of the stroke\n",
	       m->boundary_ms, m->p.boundary_fraction);
	printf("mean seek %.3f ms, mean rotational latency %.3f ms\n",
	       seek * 1e3, m->rev_s / 2 * 1e3);
	printf("random 4 KiB reads at queue depth 1: %.2f IOPS\n", iops);
	printf("media rate %.1f MB/s at the start, %.1f MB/s at the end\n",
	       first / 1e6, last / 1e6);
}

int main(int argc, char **argv)
{
	static struct diskemu d = {.image_fd = -1, .loop_fd = -1};
	struct drive_profile p;
	const char *table;

	errmsg_init("diskemu");
	if (diskemu_parse_options(argc, argv, &d.opt))
		return 2;
	table = profiles_file(&d.opt);
	if (d.opt.list)
		return drive_profile_list(table, stdout) < 0;
	if (drive_profile_load(table, d.opt.profile, &p) < 0 ||
	    drive_model_init(&d.model, &p) < 0 || open_image(&d) < 0)
		return 1;
	if (d.opt.predict) {
		diskemu_print_prediction(&d);
		return 0;
	}
	if (geteuid() != 0) {
		errmsg(NULL, "must run as root (FUSE mount, loop device): try "
		       "sudo");
		return 1;
	}
	return diskemu_serve(&d);
}
