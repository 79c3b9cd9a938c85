/* See loopdev.h. */
#include "loopdev.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errmsg.h"

/* Another program may take the device LOOP_CTL_GET_FREE offered before we
 * configure it; then ask again. */
#define ATTACH_TRIES 16

/* The sysfs attribute ATTR of loop device DEV ("/dev/loopN"), or "". */
static void loop_attr(const char *dev, const char *attr, char *buf,
		      size_t size)
{
	char path[128];
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "/sys/block/%s/loop/%s",
		 strrchr(dev, '/') + 1, attr);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, size - 1);
		close(fd);
	}
	buf[n > 0 ? n : 0] = '\0';
}

static int configure(int loop_fd, int file_fd, const char *name)
{
	struct loop_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.fd = file_fd;
	cfg.info.lo_flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR |
		LO_FLAGS_DIRECT_IO;
	snprintf((char *)cfg.info.lo_file_name, LO_NAME_SIZE, "%s", name);
	return ioctl(loop_fd, LOOP_CONFIGURE, &cfg);
}

/* Opens the next free loop device and configures it; -1 with errno. */
static int attach_once(int ctl, int file_fd, const char *name, char *dev,
		       size_t dev_size)
{
	int n = ioctl(ctl, LOOP_CTL_GET_FREE), fd;

	if (n < 0)
		return -1;
	snprintf(dev, dev_size, "/dev/loop%d", n);
	fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (configure(fd, file_fd, name) < 0) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

int loop_attach(int file_fd, const char *name, char *dev, size_t dev_size)
{
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC), fd = -1;
	char dio[8];

	if (ctl < 0) {
		errmsg("/dev/loop-control", "%s", errmsg_strerror(errno));
		return -1;
	}
	for (int i = 0; i < ATTACH_TRIES && fd < 0; i++) {
		fd = attach_once(ctl, file_fd, name, dev, dev_size);
		if (fd < 0 && errno != EBUSY)
			break;
	}
	close(ctl);
	if (fd < 0) {
		errmsg("cannot attach a loop device", "%s",
		       errmsg_strerror(errno));
		return -1;
	}
	/* The kernel quietly falls back to buffered I/O when the file
	 * cannot do direct I/O; then requests would be cached. */
	loop_attr(dev, "dio", dio, sizeof(dio));
	if (dio[0] != '1') {
		errmsg(dev, "the kernel did not enable direct I/O on the loop "
		       "device");
		loop_detach(fd, dev);
		return -1;
	}
	return fd;
}

int loop_set_read_ahead(const char *dev, unsigned kb)
{
	char path[128], text[24];
	int fd, len, ok;

	snprintf(path, sizeof(path), "/sys/block/%s/queue/read_ahead_kb",
		 strrchr(dev, '/') + 1);
	len = snprintf(text, sizeof(text), "%u\n", kb);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	ok = fd >= 0 && write(fd, text, (size_t)len) == len;
	if (!ok)
		errmsg(path, "cannot set it to %u: %s", kb,
		       errmsg_strerror(errno));
	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

int loop_attached(const char *dev)
{
	char backing[8];

	loop_attr(dev, "backing_file", backing, sizeof(backing));
	return backing[0] != '\0';
}

int loop_detach(int loop_fd, const char *dev)
{
	/* EBUSY or ENXIO here mean auto-clear already has it in hand; a
	 * short-lived holder (udev's probe) lets go within the wait. */
	ioctl(loop_fd, LOOP_CLR_FD, 0);
	close(loop_fd);
	for (int i = 0; i < 300 && loop_attached(dev); i++)
		usleep(10000);
	return loop_attached(dev) ? -1 : 0;
}
