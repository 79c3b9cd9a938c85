/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The pages a read bio fills: page-cache folios of regular files being
 * filled (locked, not uptodate), as runs of consecutive pages of one file.
 * That one test is what makes a page "read from storage" (see trace.bpf.c).
 * Shared by trace (read records) and cachestat/cachetop (pending pages).
 *
 * With want_metadata, pages that belong to no regular file become runs of
 * *metadata*: device pages, numbered from the bio's sector (see
 * metadata_page() for which pages those are).
 *
 * Each run goes to the sink on_read_run(walk) (sinks.bpf.h) as the walk
 * moves on; the caller hands it the last run after walk_bio().
 */
#ifndef PAGETRACE_BIO_PAGES_BPF_H
#define PAGETRACE_BIO_PAGES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "scratch.bpf.h"
#include "page_math.bpf.h"
#include "sinks.bpf.h"
#include "traced_tasks.bpf.h"	/* struct read_context */

#define S_IFMT		00170000
#define S_IFREG		0100000
#define REQ_OP_MASK	0xffU	/* (1 << REQ_OP_BITS) - 1 */
/*
 * Bio vector entries walked per bio. BIO_MAX_VECS is 256; a longer walk
 * (a cloned bio whose iterator starts late) is counted as lost.
 */
#define MAX_BVECS		256

/* A run of consecutive pages of one file, or of one device, inside one bio. */
struct page_run {
	__u64 inode;		/* metadata: 0 */
	__u64 first;		/* metadata: page of the device */
	__u64 nr_pages;
	__u32 metadata;		/* a run of metadata pages of device `dev` */
	__u32 dev;
};

/* trace: also record metadata (cachestat and cachetop count file pages only). */
const volatile bool want_metadata = false;

/* Words @w are a page-cache folio's (clean mapping) that is being filled. */
static __always_inline bool words_being_filled(const struct page_words *w)
{
	return w->mapping && !(w->mapping & MAPPING_FLAG_BITS) && flags_locked_not_uptodate(w->flags);
}

/* The regular file whose page-cache folio (words @w) is being filled, or NULL. */
static __always_inline struct inode *file_being_filled(const struct page_words *w)
{
	/* A local: BPF_CORE_READ must not relocate page_words, which is ours. */
	struct address_space *mapping = (struct address_space *)w->mapping;
	struct inode *inode;

	if (!words_being_filled(w))
		return NULL;
	inode = BPF_CORE_READ(mapping, host);
	if (!inode || (BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFREG)
		return NULL;
	return inode;
}

/*
 * Is this page, which is no regular file's page being filled, a metadata
 * page being read: a filesystem's own buffer, or a page of the block device's
 * page cache? Excluded: anonymous and shmem pages and the swap cache (swap-
 * backed; so swap-ins are not metadata), pages with a mapping flag (anon, KSM,
 * movable), regular files' pages (an O_DIRECT buffer that is a mapped file),
 * and uptodate pages (an O_DIRECT read into a mapped device). Slab pages
 * (kmalloc'ed buffers) are metadata too; add_segment() tells them apart
 * before this, as their mapping word is not a mapping. What is left:
 *  - pages with no mapping at all: buffers a filesystem allocates for
 *    itself (xfs_buf folios, vmalloc'ed buffers);
 *  - !uptodate pages of a non-regular inode: the block device's page cache
 *    (ext4's buffer heads: inode tables, directories, extent blocks,
 *    bitmaps), directory pages of filesystems that keep them in the page
 *    cache. Buffer-head reads do not lock the folio, so unlike file pages
 *    the lock is not asked for.
 */
static __always_inline bool metadata_page(const struct page_words *w)
{
	struct address_space *mapping = (struct address_space *)w->mapping;
	struct inode *host;

	if (folio_is_swapbacked(w->flags))
		return false;
	if (!mapping)
		return true;
	if (w->mapping & MAPPING_FLAG_BITS)
		return false;
	host = BPF_CORE_READ(mapping, host);
	if (!host || (BPF_CORE_READ(host, i_mode) & S_IFMT) == S_IFREG)
		return false;
	return !flags_uptodate(w->flags);
}

/* State of one walk over a bio's vectors. */
struct bio_walk {
	__u64 vecs;		/* struct bio_vec * */
	__u32 idx;		/* next vector */
	__u32 skip;		/* bytes of it already done (cloned bios) */
	__u32 left;		/* bytes of the bio not walked yet */
	__u32 size;		/* bytes of the bio */
	__u64 bio;		/* struct bio *: its device, for metadata */
	__u64 device_byte;	/* where the bio starts on its device, once known */
	__u32 dev;
	__u32 device_known;
	__u64 ts_ns;
	struct page_run run;
	struct read_context hint;	/* the thread's, as it was when the bio was queued */
	__u32 unexplained_cause;	/* trace: the cause when the hint explains nothing */
};

/* A bio's walk is held per CPU (scratch.bpf.h), not on the program's stack. */
SCRATCH_ROOM(bio_walk_room, struct bio_walk)

/*
 * Add pages [first, last] of @inode (or, for metadata, of the walk's device)
 * to the walk's run, handing the run to on_read_run() first when they do not
 * continue it.
 */
static __always_inline void add_pages(struct bio_walk *walk, __u64 inode, __u32 metadata,
				      __u64 first, __u64 last)
{
	struct page_run *run = &walk->run;

	if (run->inode == inode && run->metadata == metadata && first >= run->first &&
	    first <= run->first + run->nr_pages) {
		/* Continues the run, or shares its last page (sub-page blocks). */
		if (last + 1 > run->first + run->nr_pages)
			run->nr_pages = last + 1 - run->first;
		return;
	}
	on_read_run(walk);
	run->inode = inode;
	run->metadata = metadata;
	run->dev = walk->dev;
	run->first = first;
	run->nr_pages = last - first + 1;
}

/* Metadata: the device pages under bytes [pos, pos + len) of the bio. */
static __always_inline void add_metadata(struct bio_walk *walk, __u32 pos, __u32 len)
{
	struct bio *bio = (struct bio *)walk->bio;
	__u64 byte;

	if (!walk->device_known) {
		walk->device_byte = bio_device_byte(bio);
		walk->dev = bio_device(bio);
		walk->device_known = 1;
	}
	byte = walk->device_byte + pos;
	add_pages(walk, 0, 1, byte >> page_shift, (byte + len - 1) >> page_shift);
}

/*
 * The bytes [offset, offset + len) of the bvec starting at @page, which are
 * bytes [pos, pos + len) of the bio: a file's pages, metadata, or neither.
 */
static __always_inline void add_segment(struct bio_walk *walk, struct page *page,
					__u32 offset, __u32 len, __u32 pos)
{
	struct folio *folio = (struct folio *)page;
	struct page_words w;
	struct inode *inode;
	__u64 byte;

	if (!len)
		return;
	read_page_words(page, &w);
	/*
	 * A large folio's tail page points at its head with bit 0 of
	 * compound_head set (stable since v2.6; v5.16 "mm: Add folio type" made
	 * the head a struct folio with the same layout; core_fixes.bpf.h reads
	 * v7.x's compound_info): the words that count are the head's.
	 */
	if (w.compound_head & 1) {
		folio = (struct folio *)compound_head_of((unsigned long)page, w.compound_head);
		read_page_words(folio, &w);
	}
	/* A slab page's mapping word is the slab's own: never read it as one. */
	if (words_are_slab(&w)) {
		if (want_metadata && bio_names_device())
			add_metadata(walk, pos, len);
		return;
	}
	inode = file_being_filled(&w);
	if (!inode) {
		if (want_metadata && bio_names_device() && metadata_page(&w))
			add_metadata(walk, pos, len);
		return;
	}
	byte = (page_nr_in_folio(page, folio) << page_shift) + offset;
	add_pages(walk, (__u64)inode, 0, w.index + (byte >> page_shift),
		  w.index + ((byte + len - 1) >> page_shift));
}

/* One vector, the way bio_for_each_bvec steps: from the bio's iterator. */
static __always_inline long walk_one_bvec(__u32 i, struct bio_walk *walk)
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
	add_segment(walk, vec.bv_page, vec.bv_offset + walk->skip, len, walk->size - walk->left);
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
 * Kernels before v5.13 ("bpf: Add bpf_for_each_map_elem() helper" brought
 * BPF_PSEUDO_FUNC) refuse even a dead reference to a callback, so a program
 * for them is built with @may_loop false, which leaves the branch out.
 */
/* bpf_loop's callback: its context must lie on the stack, the walk's pointer does. */
static long walk_one_bvec_of(__u32 i, struct bio_walk **walk)
{
	return walk_one_bvec(i, *walk);
}

/*
 * The bounded loop in a frame of its own: inlined, its spill slots (the
 * compiler lays out one frame for every path) counted against the stack of
 * kernels with bpf_loop, which never run it.
 */
static __noinline void walk_bio_unrolled(struct bio_walk *walk)
{
	for (__u32 i = 0; i < MAX_BVECS; i++)
		if (walk_one_bvec(i, walk))
			break;
}

static __always_inline void walk_bio(struct bio_walk *walk, bool may_loop)
{
	if (may_loop && use_bpf_loop)
		bpf_loop(MAX_BVECS, walk_one_bvec_of, &walk, 0);
	else
		walk_bio_unrolled(walk);
}

/*
 * tp_btf only: a bio of one vector that starts a folio (a single-page read,
 * as most faults and small reads are), read with plain loads through the
 * kernel's types where the generic walk pays a helper call per field. On
 * success the bio is one run of @walk and @id is its file; false, with
 * nothing done, for anything else (metadata, tail pages, several vectors):
 * the generic walk takes those.
 */
static __always_inline bool one_file_vector(struct bio *bio, struct bio_walk *walk,
					    struct file_id *id)
{
	struct bio_vec *vec = bio->bi_io_vec;
	struct address_space *mapping;
	struct page_words w;
	struct inode *inode;
	__u64 first, last;

	if (walk->idx || walk->skip || !vec || vec->bv_len != walk->size || !vec->bv_page)
		return false;
	/*
	 * The page's words with one helper call: the verifier will not let a
	 * program test the bits of a word it types as a pointer (compound_head,
	 * mapping). Past these checks, the same fields are followed as pointers.
	 */
	read_page_words(vec->bv_page, &w);
	if ((w.compound_head & 1) || words_are_slab(&w) || !words_being_filled(&w))
		return false;
	/* The head page's mapping is its folio's (struct page: every kernel). */
	mapping = vec->bv_page->mapping;
	inode = mapping ? mapping->host : NULL;
	if (!inode || (inode->i_mode & S_IFMT) != S_IFREG)
		return false;
	id->dev = inode->i_sb->s_dev;
	id->generation = inode->i_generation;
	id->ino = inode->i_ino;
	first = w.index + (vec->bv_offset >> page_shift);
	last = w.index + ((vec->bv_offset + vec->bv_len - 1) >> page_shift);
	/*
	 * The run keeps the inode as a number, which a typed pointer cannot
	 * become: a regular file's page cache is its inode's own i_data, so the
	 * number is the mapping's less that offset, checked against the pointer.
	 */
	walk->run.inode = w.mapping - bpf_core_field_offset(struct inode, i_data);
	if ((__u64)inode != walk->run.inode)
		return false;
	walk->run.first = first;
	walk->run.nr_pages = last - first + 1;
	walk->left = 0;
	return true;
}

/* Start a walk over @bio if it is a read with data; false otherwise. */
static __always_inline bool start_bio_walk(struct bio *bio, struct bio_walk *walk)
{
	if ((BPF_CORE_READ(bio, bi_opf) & REQ_OP_MASK) != 0 /* REQ_OP_READ */)
		return false;
	walk->vecs = (__u64)BPF_CORE_READ(bio, bi_io_vec);
	walk->idx = BPF_CORE_READ(bio, bi_iter.bi_idx);
	walk->skip = bio_iter_done(bio);
	walk->left = walk->size = BPF_CORE_READ(bio, bi_iter.bi_size);
	walk->bio = (__u64)bio;
	return walk->vecs && walk->left;
}

/*
 * The same from a tp_btf program, whose @bio argument the verifier trusts:
 * plain loads (CO-RE relocated) instead of a helper call per field, which
 * is most of the time spent before the walk.
 */
static __always_inline bool start_trusted_bio_walk(struct bio *bio, struct bio_walk *walk)
{
	if ((bio->bi_opf & REQ_OP_MASK) != 0 /* REQ_OP_READ */)
		return false;
	walk->vecs = (__u64)bio->bi_io_vec;
	walk->idx = bio->bi_iter.bi_idx;
	walk->skip = trusted_bio_iter_done(bio);
	walk->left = walk->size = bio->bi_iter.bi_size;
	walk->bio = (__u64)bio;
	return walk->vecs && walk->left;
}

#endif /* PAGETRACE_BIO_PAGES_BPF_H */
