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
static __always_inline bool flags_locked_not_uptodate(unsigned long word)
{
	unsigned long locked = 1UL << bpf_core_enum_value(enum pageflags, PG_locked);
	unsigned long uptodate = 1UL << bpf_core_enum_value(enum pageflags, PG_uptodate);

	return (word & locked) && !(word & uptodate);
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
 * file's address_space (struct page_words keeps the raw word).
 */
#define MAPPING_FLAG_BITS	3UL

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
 * The words of a struct page (or folio) that the bio walk needs, read with
 * one helper call instead of one per field: the helper call is most of the
 * cost of reading a field. Offsets are the running kernel's (CO-RE); a
 * struct page is 64 bytes on every kernel, and a kernel whose fields moved
 * past that gets one read per field instead.
 */
#define PAGE_WORDS_BYTES	64

struct page_words {
	unsigned long flags;
	unsigned long compound_head;
	unsigned long mapping;	/* raw: may carry the anon/movable bits */
	unsigned long index;
	unsigned int page_type;
};

static __always_inline bool page_words_fit(__u32 offset, __u32 size)
{
	return offset + size <= PAGE_WORDS_BYTES;
}

static __always_inline void read_page_words(const void *page, struct page_words *w)
{
	const struct folio *folio = page;
	const struct page *p = page;
	__u32 flags_at = bpf_core_field_offset(struct folio, flags);
	__u32 head_at = bpf_core_field_offset(struct page, compound_head);
	__u32 mapping_at = bpf_core_field_offset(struct folio, mapping);
	__u32 index_at = bpf_core_field_offset(struct folio, index);
	__u32 type_at = bpf_core_field_offset(struct page, page_type);
	__u8 buf[PAGE_WORDS_BYTES];

	if (page_words_fit(flags_at, 8) && page_words_fit(head_at, 8) &&
	    page_words_fit(mapping_at, 8) && page_words_fit(index_at, 8) &&
	    page_words_fit(type_at, 4)) {
		if (bpf_probe_read_kernel(buf, sizeof(buf), page)) {
			__builtin_memset(w, 0, sizeof(*w));
			return;
		}
		w->flags = *(unsigned long *)(buf + flags_at);
		w->compound_head = *(unsigned long *)(buf + head_at);
		w->mapping = *(unsigned long *)(buf + mapping_at);
		w->index = *(unsigned long *)(buf + index_at);
		w->page_type = *(unsigned int *)(buf + type_at);
		return;
	}
	w->flags = folio_flags_word(folio);
	w->compound_head = BPF_CORE_READ(p, compound_head);
	w->mapping = (unsigned long)BPF_CORE_READ(folio, mapping);
	w->index = BPF_CORE_READ(folio, index);
	w->page_type = 0;
	bpf_core_read(&w->page_type, sizeof(w->page_type), &p->page_type);
}

/* folio_is_slab(), from words already read. */
static __always_inline bool words_are_slab(const struct page_words *w)
{
	if (bpf_core_enum_value_exists(enum pagetype___pgty, PGTY_slab___pgty))
		return (w->page_type >> 24) ==
		       bpf_core_enum_value(enum pagetype___pgty, PGTY_slab___pgty);
	if (bpf_core_enum_value_exists(enum pageflags___slab, PG_slab___slab))
		return w->flags & (1UL << bpf_core_enum_value(enum pageflags___slab, PG_slab___slab));
	return false;
}

/*
 * The fields of a file's id, i_sb, i_ino and i_generation, with one helper
 * call: they lie in the inode's first 128 bytes (v6.18: 40, 64, 124).
 * False, with nothing read, on a kernel where they do not.
 */
#define INODE_ID_BYTES	128

static __always_inline bool read_inode_id_words(const struct inode *inode, struct super_block **sb,
						__u64 *ino, __u32 *generation)
{
	__u32 sb_at = bpf_core_field_offset(struct inode, i_sb);
	__u32 ino_at = bpf_core_field_offset(struct inode, i_ino);
	__u32 generation_at = bpf_core_field_offset(struct inode, i_generation);
	__u8 buf[INODE_ID_BYTES];

	if (sb_at + 8 > INODE_ID_BYTES || ino_at + 8 > INODE_ID_BYTES ||
	    generation_at + 4 > INODE_ID_BYTES ||
	    bpf_probe_read_kernel(buf, sizeof(buf), inode))
		return false;
	*sb = *(struct super_block **)(buf + sb_at);
	*ino = *(__u64 *)(buf + ino_at);
	*generation = *(__u32 *)(buf + generation_at);
	return true;
}

/*
 * Partition bios are remapped to the whole disk (bi_sector += bd_start_sect,
 * blk_partition_remap() in submit_bio_noacct()) before block_bio_queue
 * fires; bi_bdev still names the partition (bio_names_device() first). The
 * offset on the device the bio names is therefore bi_sector - bd_start_sect
 * (0 for a whole disk).
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
