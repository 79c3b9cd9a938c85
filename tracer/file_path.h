/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The name of a file as the kernel side sends it (file_path.bpf.h): its
 * components, leaf first, up to its filesystem's root. User space (paths.c)
 * turns it into a path. Shared by trace and cachetop.
 */
#ifndef PAGETRACE_FILE_PATH_H
#define PAGETRACE_FILE_PATH_H

#include "file_id.h"

#define TASK_COMM_LEN		16
/* Path components the kernel walks up from a file before giving up. */
#define PATH_MAX_DEPTH		32
/* NAME_MAX + 1 */
#define PATH_NAME_LEN		256
/* The first __u32 of every ring-buffer record says what it is; this is a name. */
#define PATH_EVENT_KIND		2

#define PATH_DELETED	(1U << 0)	/* i_nlink was 0: file unlinked */
#define PATH_TOO_DEEP	(1U << 1)	/* more than PATH_MAX_DEPTH levels */
#define PATH_NO_DENTRY	(1U << 2)	/* inode had no dentry alias */

struct path_event {
	__u32 kind;		/* EVENT_PATH */
	__u32 depth;		/* components filled in names[], leaf first */
	struct file_id file;
	__u32 flags;		/* PATH_* */
	__u32 pad;
	char names[PATH_MAX_DEPTH][PATH_NAME_LEN];
};

#endif /* PAGETRACE_FILE_PATH_H */
