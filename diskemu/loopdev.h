/* A read-only loop device with direct I/O over an open file: every block
 * request becomes a read of the file, none is served from a page cache in
 * between. */
#ifndef PAGETRACE_LOOPDEV_H
#define PAGETRACE_LOOPDEV_H

#include <stddef.h>

/* Attaches FILE_FD (which the caller may close afterwards) to a free loop
 * device with direct I/O, read-only and auto-clear, named NAME; writes its
 * path to DEV. Returns the device's open descriptor, or -1 after an error
 * line (nothing attached). */
int loop_attach(int file_fd, const char *name, char *dev, size_t dev_size);

/* Asks the kernel to detach the loop device open as LOOP_FD and closes
 * it: the detach happens at once, or when its last other user closes it.
 * Returns 0, or -1 when another process still holds it open. */
int loop_detach(int loop_fd, const char *dev);

/* Sets DEV's read-ahead to KB KiB (queue/read_ahead_kb). A new loop
 * device's value is whatever the kernel last computed for that minor (128
 * or 2560 KiB were seen here), and a cold start's requests follow it.
 * Returns 0, or -1 after an error line. */
int loop_set_read_ahead(const char *dev, unsigned kb);

/* 1 while DEV still has a backing file, 0 once it is free. */
int loop_attached(const char *dev);

#endif
