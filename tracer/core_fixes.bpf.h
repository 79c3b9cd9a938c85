/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CO-RE shims: every place where the kernel's types changed under us, in one
 * file, each with the change that made it necessary. The tracer reads only
 * these accessors, never the raw fields.
 */
#ifndef PAGETRACE_CORE_FIXES_BPF_H
#define PAGETRACE_CORE_FIXES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

/*
 * v6.18 "mm: introduce memdesc_flags_t" wrapped page->flags and folio->flags
 * in a one-member struct. Both layouts are a single unsigned long at the
 * field's offset, so read the word through the field's relocated address.
 */
static __always_inline unsigned long folio_flags_word(const struct folio *folio)
{
	unsigned long word = 0;

	bpf_core_read(&word, sizeof(word), &folio->flags);
	return word;
}

/*
 * enum pageflags is not ABI: its numbering has changed between releases
 * (v6.12 removed PG_error, for one). Ask the running kernel's BTF.
 */
static __always_inline bool folio_is_locked_not_uptodate(const struct folio *folio)
{
	unsigned long word = folio_flags_word(folio);
	unsigned long locked = 1UL << bpf_core_enum_value(enum pageflags, PG_locked);
	unsigned long uptodate = 1UL << bpf_core_enum_value(enum pageflags, PG_uptodate);

	return (word & locked) && !(word & uptodate);
}

/*
 * A bio_vec names a struct page; a large folio's tail pages point at their
 * head with bit 0 of compound_head set (stable since v2.6.x; v5.16 "mm: Add
 * folio type" made the head a struct folio with the same layout).
 */
static __always_inline struct folio *page_to_folio(struct page *page)
{
	unsigned long head = BPF_CORE_READ(page, compound_head);

	if (head & 1)
		return (struct folio *)(head - 1);
	return (struct folio *)page;
}

/* Offset of @page inside its folio, in pages (tail pages are contiguous). */
static __always_inline __u64 page_nr_in_folio(struct page *page, struct folio *folio)
{
	return ((__u64)page - (__u64)folio) / bpf_core_type_size(struct page);
}

/*
 * Pages in a folio. v6.9 "mm: add folio->_nr_pages" (64-bit) holds the count
 * in the first tail page; before it, folio_order() was the low byte of
 * _flags_1. A folio that is not PG_head is one page.
 */
static __always_inline __u64 folio_pages(const struct folio *folio)
{
	unsigned long head = 1UL << bpf_core_enum_value(enum pageflags, PG_head);

	if (!(folio_flags_word(folio) & head))
		return 1;
	if (bpf_core_field_exists(folio->_nr_pages))
		return BPF_CORE_READ(folio, _nr_pages);
	return 1UL << (BPF_CORE_READ(folio, _flags_1) & 0xff);
}

/*
 * The low bits of folio->mapping mark anonymous, KSM and movable pages
 * (PAGE_MAPPING_ANON, PAGE_MAPPING_MOVABLE); only a clean pointer is a
 * file's address_space.
 */
#define MAPPING_FLAG_BITS	3UL

static __always_inline struct address_space *folio_file_mapping(const struct folio *folio)
{
	unsigned long mapping = (unsigned long)BPF_CORE_READ(folio, mapping);

	if (!mapping || (mapping & MAPPING_FLAG_BITS))
		return NULL;
	return (struct address_space *)mapping;
}

/*
 * Slab pages (kmalloc'ed buffers, such as xfs's sub-page metadata buffers)
 * reuse the words where a folio keeps its mapping, so they must be told
 * apart before folio->mapping is trusted. v6.12 moved page types to the top
 * byte of page->page_type (enum pagetype, PGTY_slab); before v6.10 "mm: free
 * up PG_slab" (Matthew Wilcox, 2024) they were flagged with PG_slab. Kernels
 * v6.10 and v6.11, with the interim encoding, are not recognised here.
 */
enum pagetype___pgty { PGTY_slab___pgty = 0 };
enum pageflags___slab { PG_slab___slab = 0 };

static __always_inline bool folio_is_slab(const struct folio *folio)
{
	if (bpf_core_enum_value_exists(enum pagetype___pgty, PGTY_slab___pgty)) {
		unsigned int type = 0;

		bpf_core_read(&type, sizeof(type), &((struct page *)folio)->page_type);
		return (type >> 24) == bpf_core_enum_value(enum pagetype___pgty, PGTY_slab___pgty);
	}
	if (bpf_core_enum_value_exists(enum pageflags___slab, PG_slab___slab))
		return folio_flags_word(folio) &
		       (1UL << bpf_core_enum_value(enum pageflags___slab, PG_slab___slab));
	return false;
}

/* Anonymous and shmem folios, and the swap cache's, are swap-backed. */
static __always_inline bool folio_is_swapbacked(unsigned long flags_word)
{
	return flags_word & (1UL << bpf_core_enum_value(enum pageflags, PG_swapbacked));
}

static __always_inline bool flags_uptodate(unsigned long flags_word)
{
	return flags_word & (1UL << bpf_core_enum_value(enum pageflags, PG_uptodate));
}

/*
 * Partition bios are remapped to the whole disk (bi_sector += bd_start_sect,
 * blk_partition_remap() in submit_bio_noacct()) before block_bio_queue
 * fires; bi_bdev still names the partition (bio_names_device() first). The offset on the device the bio
 * names is therefore bi_sector - bd_start_sect (0 for a whole disk).
 */
static __always_inline bool bio_names_device(void)
{
	/* v5.12 "block: switch bio to bi_bdev" (Christoph Hellwig, 2021) */
	return bpf_core_field_exists(((struct bio *)0)->bi_bdev);
}

static __always_inline __u32 bio_device(struct bio *bio)
{
	return BPF_CORE_READ(bio, bi_bdev, bd_dev);
}

static __always_inline __u64 bio_device_byte(struct bio *bio)
{
	__u64 sector = BPF_CORE_READ(bio, bi_iter.bi_sector);
	__u64 start = BPF_CORE_READ(bio, bi_bdev, bd_start_sect);

	return (sector >= start ? sector - start : sector) << 9;
}

/*
 * v3.2 "vfs: protect i_nlink" made i_nlink a const alias of __i_nlink;
 * read the writable name, which every kernel we can run on has.
 */
static __always_inline unsigned int inode_nlink(const struct inode *inode)
{
	return BPF_CORE_READ(inode, __i_nlink);
}

/*
 * The readahead: tracepoints (include/trace/events/readahead.h) and
 * filemap:mm_filemap_fault, which tell the cause of a read, are 2024
 * additions. Older kernels lack them; user space detects that through BTF,
 * leaves those programs unloaded, and the cause column becomes "-".
 */

#endif /* PAGETRACE_CORE_FIXES_BPF_H */
