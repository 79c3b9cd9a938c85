/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The page arithmetic that the page-access engine, the bio walk and the
 * tools share: the page size and the bpf_loop switch (set by user space
 * before load), a file's id, and bit counts over a 64-page chunk of
 * page_states (page_access.h). The base of the BPF modules: it includes
 * only the kernel's types, libbpf's helpers and core_fixes.bpf.h.
 */
#ifndef PAGETRACE_PAGE_MATH_BPF_H
#define PAGETRACE_PAGE_MATH_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "page_access.h"
#include "core_fixes.bpf.h"

const volatile __u32 page_shift = 12;
/*
 * Kernels before v5.17 "bpf: Add bpf_loop helper" have no bpf_loop; user
 * space probes for it. The walks here need it (unrolled, they are too many
 * states for the verifier): user space refuses page accesses without it.
 */
const volatile bool use_bpf_loop = true;

static __always_inline void file_id_of(struct inode *inode, struct file_id *id)
{
	struct super_block *sb;

	/* One helper call for the inode's three fields where they fit (core_fixes). */
	if (read_inode_id_words(inode, &sb, &id->ino, &id->generation)) {
		id->dev = BPF_CORE_READ(sb, s_dev);
		return;
	}
	id->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	id->generation = BPF_CORE_READ(inode, i_generation);
	id->ino = BPF_CORE_READ(inode, i_ino);
}

static __always_inline __u32 popcount64(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (__u32)((x * 0x0101010101010101ULL) >> 56);
}

/* 1 + the highest set bit of @x, 0 for 0 (LLVM 14's BPF backend has no ctlz). */
static __always_inline __u32 fls64(__u64 x)
{
	x |= x >> 1;
	x |= x >> 2;
	x |= x >> 4;
	x |= x >> 8;
	x |= x >> 16;
	x |= x >> 32;
	return popcount64(x);
}

/* Bits of chunk @chunk that fall in the pages [first, last]. */
static __always_inline __u64 range_mask(__u64 chunk, __u64 first, __u64 last)
{
	__u64 base = chunk << CHUNK_SHIFT;
	__u64 lo = first > base ? first - base : 0;
	__u64 hi = last < base + CHUNK_PAGES - 1 ? last - base : CHUNK_PAGES - 1;
	__u64 upper = hi >= 63 ? ~0ULL : (1ULL << (hi + 1)) - 1;

	if (lo > 63)
		return 0;
	return upper & ~((1ULL << lo) - 1);
}

#endif /* PAGETRACE_PAGE_MATH_BPF_H */
