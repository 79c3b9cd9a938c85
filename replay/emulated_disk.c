/* See emulated_disk.h. */
#include "emulated_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "errmsg.h"
#include "mountinfo.h"
#include "throttle.h"

static pid_t daemon_pid = -1;

/* diskemu beside replay in the source tree, else the installed one. */
static const char *diskemu_program(void)
{
	static char path[PATH_MAX + 32];
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n > 0) {
		exe[n] = '\0';
		snprintf(path, sizeof(path), "%s/../diskemu/diskemu",
			 dirname(exe));
		if (access(path, X_OK) == 0)
			return path;
	}
	return "pagetrace-diskemu";
}

int emulated_disk_has_profile(const char *name)
{
	char line[128];
	int found = 0, fds[2];
	pid_t pid;
	FILE *f;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return 0;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		execlp(diskemu_program(), "diskemu", "--list-profiles",
		       (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	while (f && fgets(line, sizeof(line), f))
		found |= strcmp(strtok(line, "\n") ? line : "", name) == 0;
	if (f)
		fclose(f);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return found;
}

/* The image under loop device DEV ("/dev/loopN"), from sysfs. */
static int backing_file(const char *dev, char *out, size_t size)
{
	char path[128];
	ssize_t n;
	int fd;

	/* A block device's name is short (the kernel's DISK_NAME_LEN, 32):
	 * a longer one is no loop device's. */
	if (strncmp(dev, "/dev/loop", 9) != 0 || strlen(dev + 5) > 32)
		return -1;
	snprintf(path, sizeof(path), "/sys/block/%.32s/loop/backing_file",
		 dev + 5);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, out, size - 1);
	close(fd);
	if (n <= 0)
		return -1;
	out[n] = '\0';
	strtok(out, "\n");
	return 0;
}

/* Mounts of our own, so that the emulated disk's mount over the file
 * system is replay's alone and goes with it. */
static int private_mounts(void)
{
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		errmsg("--device-profile", "cannot make a private mount "
		       "namespace: %s", errmsg_strerror(errno));
		return -1;
	}
	return 0;
}

/* Starts diskemu; returns once it printed its device, or -1. */
static int start_daemon(const char *profile, const char *point,
			const char *image)
{
	char line[512];
	int fds[2];
	FILE *f;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	daemon_pid = fork();
	if (daemon_pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		execlp(diskemu_program(), "diskemu", "--exit-with-parent", "-q",
		       "--profile", profile, "--mount", point, image,
		       (char *)NULL);
		errmsg("--device-profile", "cannot run %s: %s",
		       diskemu_program(), errmsg_strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	if (daemon_pid < 0 || !f || !fgets(line, sizeof(line), f)) {
		if (f)
			fclose(f);
		emulated_disk_end();
		return -1;      /* diskemu said why */
	}
	fclose(f);
	return 0;
}

/* diskemu mounts without replaying the journal (its device is
 * read-only): freezing the file system writes everything, journal
 * included, to its final place in the image first. */
static void settle(const char *point)
{
	int fd = open(point, O_RDONLY | O_CLOEXEC);

	sync();
	if (fd < 0)
		return;
	if (ioctl(fd, FIFREEZE, 0) == 0)
		ioctl(fd, FITHAW, 0);
	close(fd);
}

int emulated_disk_begin(const char *profile, const char *path)
{
	struct mount_copy mount;
	char image[PATH_MAX];
	struct stat st;

	if (stat(path, &st) < 0) {
		errmsg(path, "%s", errmsg_strerror(errno));
		return -1;
	}
	if (mount_of_dev(st.st_dev, &mount) <= 0 ||
	    backing_file(mount.source, image, sizeof(image)) < 0) {
		errmsg(path, "--device-profile %s: not on a loop device's "
		       "image (put the files in an image: docs/diskemu.md)",
		       profile);
		return -1;
	}
	settle(mount.point);
	if (private_mounts() < 0)
		return -1;
	atexit(emulated_disk_end);
	return start_daemon(profile, mount.point, image);
}

void emulated_disk_end(void)
{
	if (daemon_pid <= 0)
		return;
	kill(daemon_pid, SIGTERM);
	while (waitpid(daemon_pid, NULL, 0) < 0 && errno == EINTR)
		;
	daemon_pid = -1;
}
