/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The identity of a file, shared by every tracer tool's kernel and user
 * sides (trace, cachestat, cachetop) so that one layout serves them all.
 */
#ifndef PAGETRACE_FILE_ID_H
#define PAGETRACE_FILE_ID_H

/* Identity of a file: stable while the file exists, cheap to compare. */
struct file_id {
	__u32 dev;		/* kernel dev_t: major << 20 | minor */
	__u32 generation;	/* tells reused inode numbers apart */
	__u64 ino;
};

#endif /* PAGETRACE_FILE_ID_H */
