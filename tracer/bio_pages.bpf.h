/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The pages a read bio fills: page-cache folios of regular files being
 * filled (locked, not uptodate), as runs of consecutive pages of one file.
 * That one test is what makes a page "read from storage" (see trace.bpf.c).
 * Shared by trace (read records) and cachestat/cachetop (pending pages).
 *
 * The includer defines on_read_run(walk) before including this header: it
 * receives each run (walk->run) as the walk moves on, and must also be
 * called for the last run after walk_bio().
 */
#ifndef PAGETRACE_BIO_PAGES_BPF_H
#define PAGETRACE_BIO_PAGES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "page_access.bpf.h"	/* page_shift, use_bpf_loop */

#define S_IFMT		00170000
#define S_IFREG		0100000
#define REQ_OP_MASK	0xffU	/* (1 << REQ_OP_BITS) - 1 */
/*
 * Bio vector entries walked per bio. BIO_MAX_VECS is 256; a longer walk
 * (a cloned bio whose iterator starts late) is counted as lost.
 */
#define MAX_BVECS		256

/* Per-thread memory of the last readahead/fault trigger, for "cause". */
struct read_context {
	__u64 inode;
	__u32 cause;
	__u32 armed;
};

/* A run of consecutive pages of one file inside one bio. */
struct page_run {
	__u64 inode;
	__u64 first;
	__u64 nr_pages;
};

struct bio_walk;
static __always_inline void on_read_run(struct bio_walk *walk);

/* The regular file whose page-cache folio is being filled, or NULL. */
static __always_inline struct inode *file_being_filled(struct folio *folio)
{
	struct address_space *mapping = folio_file_mapping(folio);
	struct inode *inode;

	if (!mapping || !folio_is_locked_not_uptodate(folio))
		return NULL;
	inode = BPF_CORE_READ(mapping, host);
	if (!inode || (BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFREG)
		return NULL;
	return inode;
}

/* State of one walk over a bio's vectors. */
struct bio_walk {
	__u64 vecs;		/* struct bio_vec * */
	__u32 idx;		/* next vector */
	__u32 skip;		/* bytes of it already done (cloned bios) */
	__u32 left;		/* bytes of the bio not walked yet */
	__u32 pad;
	__u64 ts_ns;
	struct page_run run;
	struct read_context hint;	/* the thread's, as it was when the bio was queued */
};

/*
 * Add the bytes [offset, offset + len) of the bvec starting at @page to the
 * walk's run, handing the run to on_read_run() first when this segment does
 * not continue it.
 */
static __always_inline void add_segment(struct bio_walk *walk, struct page *page,
					__u32 offset, __u32 len)
{
	struct page_run *run = &walk->run;
	struct folio *folio = page_to_folio(page);
	struct inode *inode = file_being_filled(folio);
	__u64 byte, first, last, index;

	if (!inode || !len)
		return;
	index = BPF_CORE_READ(folio, index);
	byte = (page_nr_in_folio(page, folio) << page_shift) + offset;
	first = index + (byte >> page_shift);
	last = index + ((byte + len - 1) >> page_shift);

	if (run->inode == (__u64)inode && first >= run->first &&
	    first <= run->first + run->nr_pages) {
		/* Continues the run, or shares its last page (sub-page blocks). */
		if (last + 1 > run->first + run->nr_pages)
			run->nr_pages = last + 1 - run->first;
		return;
	}
	on_read_run(walk);
	run->inode = (__u64)inode;
	run->first = first;
	run->nr_pages = last - first + 1;
}

/* One vector, the way bio_for_each_bvec steps: from the bio's iterator. */
static long walk_one_bvec(__u32 i, struct bio_walk *walk)
{
	struct bio_vec vec = {};
	const void *where;
	__u32 len;

	if (!walk->left)
		return 1;
	/* Outside bpf_core_read(): bio_walk is ours, not a kernel type to relocate. */
	where = (const struct bio_vec *)walk->vecs + walk->idx + i;
	if (bpf_probe_read_kernel(&vec, sizeof(vec), where))
		return 1;
	len = vec.bv_len > walk->skip ? vec.bv_len - walk->skip : 0;
	if (len > walk->left)
		len = walk->left;
	if (!len)
		return 1;	/* a malformed vector: stop rather than spin */
	add_segment(walk, vec.bv_page, vec.bv_offset + walk->skip, len);
	walk->left -= len;
	walk->skip = 0;
	return 0;
}

/*
 * Kernels before v5.17 "bpf: Add bpf_loop helper" have no bpf_loop; there
 * the verifier walks a bounded loop over every vector (BIO_MAX_VECS, so no
 * bio is cut short; loading takes about a second longer). User space probes
 * for the helper and sets use_bpf_loop (page_access.bpf.h); the verifier then
 * drops the branch not taken, so neither path needs the other's support.
 */

static __always_inline void walk_bio(struct bio_walk *walk)
{
	if (use_bpf_loop) {
		bpf_loop(MAX_BVECS, walk_one_bvec, walk, 0);
		return;
	}
	for (__u32 i = 0; i < MAX_BVECS; i++)
		if (walk_one_bvec(i, walk))
			break;
}

/* Start a walk over @bio if it is a read with data; false otherwise. */
static __always_inline bool start_bio_walk(struct bio *bio, struct bio_walk *walk)
{
	if ((BPF_CORE_READ(bio, bi_opf) & REQ_OP_MASK) != 0 /* REQ_OP_READ */)
		return false;
	walk->vecs = (__u64)BPF_CORE_READ(bio, bi_io_vec);
	walk->idx = BPF_CORE_READ(bio, bi_iter.bi_idx);
	walk->skip = BPF_CORE_READ(bio, bi_iter.bi_bvec_done);
	walk->left = BPF_CORE_READ(bio, bi_iter.bi_size);
	return walk->vecs && walk->left;
}

#endif /* PAGETRACE_BIO_PAGES_BPF_H */
