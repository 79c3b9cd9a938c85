/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A module of the page-access engine (page_access.bpf.h), on the chunk walk:
 * the read calls. filemap:mm_filemap_get_pages is an access of the pages it
 * asked for; sys_enter of read, pread64, readv, preadv and preadv2 remembers
 * where the call starts (the thread's syscall_* fields), for the batches
 * filemap_get_pages() returns without firing the tracepoint.
 *
 * Invariant: a thread's syscall range describes its current system call only
 * (set at sys_enter, never carried to the next call).
 */
#ifndef PAGETRACE_READ_CALLS_BPF_H
#define PAGETRACE_READ_CALLS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "thread_storage.bpf.h"
#include "page_math.bpf.h"
#include "page_state.bpf.h"
#include "page_cache_walk.bpf.h"

/* ------------------------------------------------------------------ */
/* Entry points                                                        */

/* A read call's batch [index, last] of @mapping (@asked: its last page as asked), with @walk. */
static __always_inline void read_call_walk(struct chunk_walk *walk, struct address_space *mapping,
					   __u64 index, __u64 last, __u64 asked)
{
	struct thread_access *ta = thread_access(true);
	bool same_call, syscall_start;

	start_walk(walk, mapping, OP_READ_CALL, index, last);
	if (!ta) {
		if (!count_hits)
			walk_chunks(walk);	/* every batch again: slower, still right */
		return;
	}
	/*
	 * The first batch of a read system call seen at its entry: the call
	 * starts at syscall_first, even when its tracepoint says later (a batch
	 * returned by filemap_get_pages()'s error path, see
	 * page_access_read_syscall()).
	 */
	syscall_start = ta->syscall_mapping == (__u64)mapping && ta->syscall_last == asked &&
			ta->syscall_first <= index;
	ta->syscall_mapping = 0;
	/*
	 * The batches of one call share its end, and move forward. Without
	 * this, a 1 GiB read() would walk what is left of its range at each of
	 * its thousands of batches. In a call seen at its entry, a later batch
	 * may start beyond what was counted (a batch without tracepoint): the
	 * walk then covers that batch too.
	 */
	same_call = !syscall_start && ta->call_mapping == (__u64)mapping &&
		    ta->call_last == asked && index > ta->call_index &&
		    (ta->call_in_syscall || index <= ta->call_counted);
	walk->counted = syscall_start ? ta->syscall_first : same_call ? ta->call_counted : index;
	walk->first = walk->counted;
	walk_chunks(walk);
	if (!count_hits)
		walk->counted = last + 1;	/* trace: the whole call is recorded */
	ta->call_mapping = (__u64)mapping;
	ta->call_last = asked;
	ta->call_index = index;
	ta->call_counted = walk->counted;
	ta->call_in_syscall = syscall_start || (same_call && ta->call_in_syscall);
}

/* filemap:mm_filemap_get_pages(mapping, index, last_index) */
static __always_inline void page_access_read_call(struct address_space *mapping,
						  __u64 index, __u64 last)
{
	__s64 size = BPF_CORE_READ(mapping, host, i_size);
	struct chunk_walk *walk;
	__u64 asked = last;

	if (size <= 0)
		return;
	if (last > (__u64)(size - 1) >> page_shift)
		last = (__u64)(size - 1) >> page_shift;
	if (index > last)
		return;
	walk = walk_room_take(ROOM_READ_CALL);
	if (!walk) {	/* nested on this CPU: the batch is not walked */
		on_walk_cut_short();
		return;
	}
	read_call_walk(walk, mapping, index, last, asked);
	walk_room_give(walk);
}

/* ------------------------------------------------------------------ */
/* The read system calls: where a call starts                          */

/*
 * filemap_get_pages() (mm/filemap.c) hands filemap_read() a batch without
 * firing mm_filemap_get_pages when the batch's last folio is not uptodate
 * yet (readahead I/O in flight): the err: label drops that folio and returns
 * the others (`if (likely(--fbatch->nr)) return 0;`), which the read copies.
 * The next batch's tracepoint starts after them. No tracepoint, kprobe or
 * fentry sees that copy here, but the call's start does: raw_syscalls:
 * sys_enter gives the file and the position of read, pread64, readv, preadv
 * and preadv2, and page_access_read_call() starts the call's walk there.
 */
#if defined(__TARGET_ARCH_x86)
enum { NR_READ = 0, NR_PREAD64 = 17, NR_READV = 19, NR_PREADV = 295, NR_PREADV2 = 327 };
#elif defined(__TARGET_ARCH_arm64) || defined(__TARGET_ARCH_riscv)
/* include/uapi/asm-generic/unistd.h */
enum { NR_READ = 63, NR_READV = 65, NR_PREAD64 = 67, NR_PREADV = 69, NR_PREADV2 = 286 };
#else
enum { NR_READ = -1, NR_READV = -1, NR_PREAD64 = -1, NR_PREADV = -1, NR_PREADV2 = -1 };
#endif

/*
 * The calls that can put a file's mapping where an anonymous VMA was:
 * mmap, mremap, shmat, remap_file_pages, execve and execveat (munmap
 * alone cannot; the mmap after it can).
 */
#if defined(__TARGET_ARCH_x86)
enum { NR_MMAP = 9, NR_MREMAP = 25, NR_SHMAT = 30, NR_EXECVE = 59, NR_REMAP_FILE_PAGES = 216,
       NR_EXECVEAT = 322 };
#elif defined(__TARGET_ARCH_arm64) || defined(__TARGET_ARCH_riscv)
enum { NR_SHMAT = 196, NR_MREMAP = 216, NR_EXECVE = 221, NR_MMAP = 222, NR_REMAP_FILE_PAGES = 234,
       NR_EXECVEAT = 281 };
#else
enum { NR_MMAP = -1, NR_MREMAP = -1, NR_SHMAT = -1, NR_EXECVE = -1, NR_REMAP_FILE_PAGES = -1,
       NR_EXECVEAT = -1 };
#endif

static __always_inline bool may_map_a_file(long id)
{
	if (NR_MMAP < 0)
		return true;	/* numbers unknown: every call may */
	return id == NR_MMAP || id == NR_MREMAP || id == NR_SHMAT || id == NR_EXECVE ||
	       id == NR_REMAP_FILE_PAGES || id == NR_EXECVEAT;
}

/*
 * Calls that may map a file (may_map_a_file()) any traced thread has
 * started. A thread's remembered VMA (thread_fault_vma()) is trusted
 * only while this is what it was when the VMA was looked up: a
 * file mapped with MAP_FIXED over anonymous memory the thread had just
 * faulted in, and its 2 MiB folios' faults were taken for anonymous ones
 * (tests/test_pmd_mapped_faults.py; docs/lab/fault-path-cases.md, "6.18: a file mapped
 * over a thread's anonymous VMA").
 * Counted at the call's start: a lookup by another thread while the call
 * runs may still find the VMA it is replacing (no program sees the call's
 * end), a race only a program that faults on memory it is replacing runs.
 */
__u64 mapping_calls = 0;

static __always_inline bool is_read_syscall(long id)
{
	return id >= 0 && (id == NR_READ || id == NR_PREAD64 || id == NR_READV ||
			   id == NR_PREADV || id == NR_PREADV2);
}

/* vfs_read(): a call moves at most MAX_RW_COUNT bytes (INT_MAX & PAGE_MASK). */
#define MAX_RW_COUNT_PAGE_MASKED(shift)	(0x7fffffffULL & ~((1ULL << (shift)) - 1))
/* A readv of more vectors than this is left to the tracepoint alone. */
#define MAX_SUMMED_IOVECS	8

static __always_inline struct file *current_file_of_fd(__u64 fd)
{
	struct task_struct *task = current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds, *file = NULL;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	return file;
}

/* The bytes a readv asks for: the sum of its vectors' lengths, or 0. */
static __always_inline __u64 iovec_bytes(const struct iovec *iov, __u64 count)
{
	struct iovec vec;
	__u64 total = 0;

	if (count > MAX_SUMMED_IOVECS)
		return 0;
	for (int i = 0; i < MAX_SUMMED_IOVECS; i++) {
		if (i >= count)
			break;
		if (bpf_probe_read_user(&vec, sizeof(vec), &iov[i]))
			return 0;
		total += vec.iov_len;
	}
	return total;
}

/*
 * Where read call @id(@fd, @arg2, @arg3, @arg4) starts, for the thread's
 * next batches. A global function: its frame is not on the stack of the
 * program's deepest call chain (the last fault's, page_access_syscall_starts()).
 */
__noinline int read_syscall_starts(long id, __u64 fd, __u64 arg2, __u64 arg3, __u64 arg4)
{
	struct thread_access *ta;
	struct file *file;
	__s64 given_pos = -1;
	__u64 bytes, pos;

	if (id == NR_PREAD64 || id == NR_PREADV || id == NR_PREADV2)
		given_pos = (__s64)arg4;
	bytes = (id == NR_READ || id == NR_PREAD64) ? arg3 :
		iovec_bytes((const struct iovec *)arg2, arg3);
	if (bytes > MAX_RW_COUNT_PAGE_MASKED(page_shift))
		bytes = MAX_RW_COUNT_PAGE_MASKED(page_shift);
	ta = thread_access(true);
	if (!ta)
		return 0;
	ta->syscall_mapping = 0;
	file = current_file_of_fd(fd);
	if (!bytes || !file || (given_pos < 0 && id != NR_READ && id != NR_READV &&
				id != NR_PREADV2))
		return 0;
	/* preadv2 with offset -1 reads at the file position, as read does. */
	pos = given_pos >= 0 ? (__u64)given_pos : (__u64)BPF_CORE_READ(file, f_pos);
	ta->syscall_first = pos >> page_shift;
	ta->syscall_last = (pos + bytes - 1) >> page_shift;
	ta->syscall_mapping = (__u64)BPF_CORE_READ(file, f_mapping);
	return 0;
}

/* raw_syscalls:sys_enter for a traced thread: remember where a read call starts. */
static __always_inline void page_access_read_syscall(struct pt_regs *regs, long id)
{
	read_syscall_starts(id, PT_REGS_PARM1_CORE_SYSCALL(regs), PT_REGS_PARM2_CORE_SYSCALL(regs),
			    PT_REGS_PARM3_CORE_SYSCALL(regs), PT_REGS_PARM4_CORE_SYSCALL(regs));
}

#endif /* PAGETRACE_READ_CALLS_BPF_H */
