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
 * Flavours of kernel types, for fields that were renamed or retyped. Each
 * holds only the field it is for; libbpf matches it against the running
 * kernel's type of the same name (the part before "___"), through anonymous
 * unions. preserve_access_index: vmlinux.h applies it only to its own types.
 */
#define CORE_FLAVOUR __attribute__((preserve_access_index))

/* Before v6.18 "mm: introduce memdesc_flags_t": page->flags a plain word. */
struct page___ulong_flags { unsigned long flags; } CORE_FLAVOUR;
/*
 * Since v6.18: a struct of that one word. Named by a flavour of its own, as
 * a build whose vmlinux.h is older (the arm64 build's, from 6.12) has the
 * plain word in struct page, which no v6.18+ kernel's struct matches.
 */
struct memdesc_flags___word { unsigned long f; };
struct page___memdesc_flags { struct memdesc_flags___word flags; } CORE_FLAVOUR;
/* v7.x renamed page->compound_head to compound_info (and may store a mask). */
struct page___compound_info { unsigned long compound_info; } CORE_FLAVOUR;
/* Before v6.16 or so, page->index (now folio->index, page->__folio_index). */
struct page___with_index { unsigned long index; } CORE_FLAVOUR;
/* v6.1 to v6.12: the folio's page count is _folio_nr_pages. */
struct folio___folio_nr_pages { unsigned int _folio_nr_pages; } CORE_FLAVOUR;
/*
 * Later, _nr_pages: a flavour too, so that a vmlinux.h without it builds
 * (the arm64 build's, from Debian's arm64 6.12: docs/kernels.md, "arm64").
 */
struct folio___nr_pages { unsigned long _nr_pages; } CORE_FLAVOUR;
/* v7.x renamed bvec_iter.bi_bvec_done to bi_offset (same meaning). */
struct bvec_iter___offset { unsigned int bi_offset; } CORE_FLAVOUR;
struct bio___offset { struct bvec_iter___offset bi_iter; } CORE_FLAVOUR;

/*
 * v6.1 "mm: start tracking VMAs with maple tree" (Liam R. Howlett, 2022):
 * an address space's VMAs are in a maple tree, mm->mm_mt, which readers
 * walk under RCU (lock_vma_under_rcu(), v6.4). vma_lookup.bpf.h reads it
 * through these; on kernels before, mm_mt does not exist and nothing is read.
 * The arrays' lengths are the running kernel's (bpf_core_field_size()).
 */
struct maple_tree___pagetrace { void *ma_root; } CORE_FLAVOUR;
struct mm_struct___maple { struct maple_tree___pagetrace mm_mt; } CORE_FLAVOUR;
struct maple_range_64___pagetrace { unsigned long pivot[1]; void *slot[1]; } CORE_FLAVOUR;
struct maple_arange_64___pagetrace { unsigned long pivot[1]; void *slot[1]; } CORE_FLAVOUR;
enum maple_type___pagetrace {
	maple_leaf_64___pagetrace = 1,
	maple_range_64___pagetrace = 2,
	maple_arange_64___pagetrace = 3,
};

/*
 * Offsets of the words of a struct page (and of a folio, which overlays its
 * head page) that pagetrace reads: relocated to the running kernel's layout,
 * whichever of the names above it has. struct page exists on every kernel;
 * struct folio only from v5.16 "mm: Add folio type", so folio fields are
 * asked for only where struct page lacks them.
 */
/*
 * Before v6.1 "cgroup: Replace cgroup->ancestor_ids[] with ->ancestors[]"
 * (Tejun Heo, 2022) a cgroup kept its ancestors' ids; since, pointers to
 * them. Either way entry LEVEL is the ancestor at that depth (0: the root).
 */
struct cgroup___ancestor_ids { __u64 ancestor_ids[0]; } CORE_FLAVOUR;

/* The id of @cgrp's ancestor at depth @level (itself at its own), else 0. */
static __always_inline __u64 cgroup_ancestor_id(struct cgroup *cgrp, __u32 level)
{
	struct cgroup *ancestor = NULL;
	__u64 id = 0;

	if (!cgrp || BPF_CORE_READ(cgrp, level) < (int)level)
		return 0;
	if (bpf_core_field_exists(cgrp->ancestors)) {
		bpf_core_read(&ancestor, sizeof(ancestor), &cgrp->ancestors[level]);
		return ancestor ? BPF_CORE_READ(ancestor, kn, id) : 0;
	}
	bpf_core_read(&id, sizeof(id),
		      &((struct cgroup___ancestor_ids *)cgrp)->ancestor_ids[level]);
	return id;
}

static __always_inline __u32 page_flags_offset(void)
{
	if (bpf_core_field_exists(struct page___ulong_flags, flags))
		return bpf_core_field_offset(struct page___ulong_flags, flags);
	return bpf_core_field_offset(struct page___memdesc_flags, flags);
}

static __always_inline __u32 page_compound_offset(void)
{
	if (bpf_core_field_exists(struct page, compound_head))
		return bpf_core_field_offset(struct page, compound_head);
	return bpf_core_field_offset(struct page___compound_info, compound_info);
}

static __always_inline __u32 page_index_offset(void)
{
	if (bpf_core_field_exists(struct page___with_index, index))
		return bpf_core_field_offset(struct page___with_index, index);
	return bpf_core_field_offset(struct folio, index);
}

/*
 * The head of a tail page at @page whose compound word is @word (bit 0 set).
 * The word is the head's address + 1, except on v7.x kernels built with
 * HugeTLB vmemmap optimisation and a power-of-2 struct page, where it is a
 * mask + 1: high bits all ones down to the head's alignment, the rest zero
 * (include/linux/page-flags.h, _compound_head()). A mask is what no struct
 * page address is: a power of two once negated.
 */
static __always_inline unsigned long compound_head_of(unsigned long page, unsigned long word)
{
	unsigned long bits = word & ~1UL, negated = -bits;

	if (negated && !(negated & (negated - 1)))
		return page & bits;
	return word - 1;
}

/* The flags word of a page or folio. */
static __always_inline unsigned long page_flags_word(const void *page)
{
	unsigned long word = 0;

	bpf_probe_read_kernel(&word, sizeof(word), page + page_flags_offset());
	return word;
}

/* Bytes of the current vector a bio's iterator has done (cloned bios). */
static __always_inline __u32 bio_iter_done(struct bio *bio)
{
	if (bpf_core_field_exists(bio->bi_iter.bi_bvec_done))
		return BPF_CORE_READ(bio, bi_iter.bi_bvec_done);
	return BPF_CORE_READ((struct bio___offset *)bio, bi_iter.bi_offset);
}

/* The same from a tp_btf program's trusted bio: a plain load. */
static __always_inline __u32 trusted_bio_iter_done(struct bio *bio)
{
	if (bpf_core_field_exists(bio->bi_iter.bi_bvec_done))
		return bio->bi_iter.bi_bvec_done;
	return ((struct bio___offset *)bio)->bi_iter.bi_offset;
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
 * in the first tail page; v6.1 to v6.12 called it _folio_nr_pages; without
 * either, folio_order() is the low byte of _flags_1. A folio that is not
 * PG_head is one page.
 */
static __always_inline __u64 folio_pages(const struct folio *folio)
{
	unsigned long head = 1UL << bpf_core_enum_value(enum pageflags, PG_head);

	if (!(page_flags_word(folio) & head))
		return 1;
	if (bpf_core_field_exists(struct folio___nr_pages, _nr_pages))
		return BPF_CORE_READ((struct folio___nr_pages *)folio, _nr_pages);
	if (bpf_core_field_exists(struct folio___folio_nr_pages, _folio_nr_pages))
		return BPF_CORE_READ((struct folio___folio_nr_pages *)folio, _folio_nr_pages);
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
 * Room for the one-call reads below, off the BPF stack: kernels before
 * v6.13 ("bpf: Support private stack for bpf progs") allow 512 bytes for
 * all frames of a call chain together, and the bio walk's chain (program,
 * bpf_loop callback, emit function) needs its frames small. A per-CPU
 * array lookup is inlined by the verifier on the kernels that matter for
 * speed (v6.10 and later).
 */
#define READ_SCRATCH_BYTES	128

struct read_scratch {
	__u8 bytes[READ_SCRATCH_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct read_scratch);
} read_scratch SEC(".maps");

static __always_inline __u8 *read_scratch_bytes(void)
{
	__u32 zero = 0;
	struct read_scratch *scratch = bpf_map_lookup_elem(&read_scratch, &zero);

	return scratch ? scratch->bytes : NULL;
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
	__u32 flags_at = page_flags_offset();
	__u32 head_at = page_compound_offset();
	__u32 mapping_at = bpf_core_field_offset(struct page, mapping);
	__u32 index_at = page_index_offset();
	__u32 type_at = bpf_core_field_offset(struct page, page_type);
	__u8 *buf = read_scratch_bytes();

	if (buf && page_words_fit(flags_at, 8) && page_words_fit(head_at, 8) &&
	    page_words_fit(mapping_at, 8) && page_words_fit(index_at, 8) &&
	    page_words_fit(type_at, 4)) {
		if (bpf_probe_read_kernel(buf, PAGE_WORDS_BYTES, page)) {
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
	__builtin_memset(w, 0, sizeof(*w));
	bpf_probe_read_kernel(&w->flags, sizeof(w->flags), page + flags_at);
	bpf_probe_read_kernel(&w->compound_head, sizeof(w->compound_head), page + head_at);
	bpf_probe_read_kernel(&w->mapping, sizeof(w->mapping), page + mapping_at);
	bpf_probe_read_kernel(&w->index, sizeof(w->index), page + index_at);
	bpf_probe_read_kernel(&w->page_type, sizeof(w->page_type), page + type_at);
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
	__u8 *buf = read_scratch_bytes();

	if (!buf || sb_at + 8 > INODE_ID_BYTES || ino_at + 8 > INODE_ID_BYTES ||
	    generation_at + 4 > INODE_ID_BYTES ||
	    bpf_probe_read_kernel(buf, INODE_ID_BYTES, inode))
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
 * The dentry whose alias list node is @node (inode->i_dentry's entries).
 * v7.x made dentry's d_u union anonymous: d_alias is then a direct member.
 */
struct dentry___anonymous_d_u { struct hlist_node d_alias; } CORE_FLAVOUR;

static __always_inline struct dentry *dentry_of_alias(struct hlist_node *node)
{
	if (bpf_core_field_exists(struct dentry, d_u))
		return (void *)node - bpf_core_field_offset(struct dentry, d_u.d_alias);
	return (void *)node - bpf_core_field_offset(struct dentry___anonymous_d_u, d_alias);
}

/*
 * kthread_data(): a kernel thread's struct kthread. v5.17 "kthread:
 * Generalize pf_io_worker so it can point to struct kthread" (Eric W.
 * Biederman, 2021) keeps it in worker_private; before, set_child_tid held it.
 */
struct task_struct___set_child_tid { int *set_child_tid; } CORE_FLAVOUR;

static __always_inline struct kthread *task_kthread(struct task_struct *task)
{
	if (bpf_core_field_exists(task->worker_private))
		return BPF_CORE_READ(task, worker_private);
	return (void *)BPF_CORE_READ((struct task_struct___set_child_tid *)task, set_child_tid);
}

/*
 * x86's user_mode(regs) (arch/x86/include/asm/ptrace.h, 64-bit): the trap
 * came from user mode when the low two bits of the saved cs, its privilege
 * level, are not 0. cs was an unsigned long until v6.9 "x86/ptrace: Cleanup
 * the definition of the pt_regs structure" (Xin Li, for FRED) made it a u16
 * in a union with csx; its low 16 bits are the same either way
 * (little-endian). A flavour: other architectures' pt_regs have no cs (the
 * arm64 build's vmlinux.h), and only x86 loads a program that reads it.
 */
struct pt_regs___x86 { __u16 cs; } CORE_FLAVOUR;

static __always_inline bool x86_user_mode(struct pt_regs *regs)
{
	return (BPF_CORE_READ((struct pt_regs___x86 *)regs, cs) & 3) != 0;
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
