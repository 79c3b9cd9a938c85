// SPDX-License-Identifier: GPL-2.0
/*
 * pagetrace kernel side: record every file page that a traced task caused
 * to be read from storage.
 *
 * What is recorded: read bios, at block:block_bio_queue, whose pages are
 * page-cache folios of regular files being filled (locked, not uptodate).
 * That one test is what makes a record mean "read from storage": page-cache
 * hits issue no bio; pages created by writes, appends and fallocate are not
 * read; tmpfs, shmem, proc and sysfs have no block device; O_DIRECT bios
 * carry user buffers, never locked !uptodate page-cache folios of a file.
 * (filemap:mm_filemap_add_to_page_cache alone cannot tell a read from a
 * write: both insert new folios.)
 *
 * The tracepoint fires in the submitting task, which for buffered reads,
 * faults and readahead is the task that caused the read, so attribution is
 * a lookup of the current thread in traced_tids, kept up to date from
 * sched_process_fork/exit.
 *
 * Why a page was read (the "cause" column) comes from the readahead: and
 * filemap: tracepoints, which fire in the same task just before the bios
 * are queued; see note_ra_trigger() and friends.
 *
 * Every program exists twice, as tp_btf and as raw_tp (TRACEPOINT_PROGRAMS);
 * user space loads one set, tp_btf where the kernel accepts it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "trace.h"
#include "core_fixes.bpf.h"

#define S_IFMT		00170000
#define S_IFREG		0100000
#define REQ_OP_MASK	0xffU	/* (1 << REQ_OP_BITS) - 1 */

const volatile bool trace_all = false;
const volatile bool follow_children = true;
const volatile bool want_cause = false;
const volatile __u32 page_shift = 12;
/* Wake the reader only once this much is waiting; it also polls on a timer. */
const volatile __u64 wakeup_bytes = 1 << 20;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);		/* tid */
	__type(value, __u8);
} traced_tids SEC(".maps");

/* Per-thread memory of the last readahead/fault trigger, for "cause". */
struct read_context {
	__u64 inode;
	__u32 cause;
	__u32 armed;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);		/* tid */
	__type(value, struct read_context);
} read_contexts SEC(".maps");

/* Files whose name was already sent, so that each name goes out once. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct file_id);
	__type(value, __u8);
} named_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);	/* user space may resize */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &slot);

	if (value)
		*value += 1;
}

/*
 * Waking user space for every record costs a context switch per page read
 * (tens of microseconds on a small VM); batch instead. The reader polls every
 * 100 ms anyway, so records never wait longer than that.
 */
static __always_inline __u64 wakeup_flags(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ?
		BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline __u32 current_tid(void)
{
	return (__u32)bpf_get_current_pid_tgid();
}

static __always_inline bool current_is_traced(void)
{
	__u32 tid;

	if (trace_all)
		return true;
	tid = current_tid();
	return bpf_map_lookup_elem(&traced_tids, &tid) != NULL;
}

static __always_inline void file_id_of(struct inode *inode, struct file_id *id)
{
	id->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	id->generation = BPF_CORE_READ(inode, i_generation);
	id->ino = BPF_CORE_READ(inode, i_ino);
}

/* The dentry an inode is known by: the first of its aliases. */
static __always_inline struct dentry *inode_dentry(struct inode *inode)
{
	struct hlist_node *first = BPF_CORE_READ(inode, i_dentry.first);

	if (!first)
		return NULL;
	return container_of(first, struct dentry, d_u.d_alias);
}

/*
 * Send the name of a file, leaf first, up to its filesystem's root; user
 * space maps the filesystem to its mount point. A global function, so the
 * verifier checks this walk once instead of at every call site.
 */
__noinline int emit_file_path(__u64 inode_addr)
{
	struct inode *inode = (struct inode *)inode_addr;
	struct path_event *event;
	struct dentry *dentry, *parent;
	struct file_id id = {};
	__u32 depth = 0;
	__u8 one = 1;

	if (!inode)
		return 0;
	file_id_of(inode, &id);
	if (bpf_map_update_elem(&named_files, &id, &one, BPF_NOEXIST))
		return 0;	/* sent before */

	event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	if (!event) {
		/* Forget it, so that the next read of the file tries again. */
		bpf_map_delete_elem(&named_files, &id);
		count(COUNTER_LOST_PATH);
		return 0;
	}
	event->kind = EVENT_PATH;
	event->file = id;
	event->flags = inode_nlink(inode) == 0 ? PATH_DELETED : 0;

	dentry = inode_dentry(inode);
	if (!dentry)
		event->flags |= PATH_NO_DENTRY;
	for (int i = 0; i < PATH_MAX_DEPTH && dentry; i++) {
		parent = BPF_CORE_READ(dentry, d_parent);
		if (parent == dentry || !parent) {
			dentry = NULL;	/* reached the filesystem's root */
			break;
		}
		bpf_probe_read_kernel_str(event->names[i], PATH_NAME_LEN,
					  BPF_CORE_READ(dentry, d_name.name));
		depth = i + 1;
		dentry = parent;
	}
	if (dentry)
		event->flags |= PATH_TOO_DEEP;
	event->depth = depth;
	bpf_ringbuf_submit(event, wakeup_flags());
	return 0;
}

/* A run of consecutive pages of one file inside one bio. */
struct page_run {
	__u64 inode;
	__u64 first;
	__u64 nr_pages;
};

__noinline int emit_page_run(__u64 inode_addr, __u64 first, __u64 nr_pages,
			     __u64 ts_ns, __u32 cause)
{
	struct inode *inode = (struct inode *)inode_addr;
	struct pages_event *event;
	__u64 id;

	if (!inode || !nr_pages)
		return 0;
	emit_file_path(inode_addr);
	event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	if (!event) {
		count(COUNTER_LOST_RINGBUF);
		return 0;
	}
	id = bpf_get_current_pid_tgid();
	event->kind = EVENT_PAGES;
	event->nr_pages = nr_pages;
	event->ts_ns = ts_ns;
	file_id_of(inode, &event->file);
	event->index = first;
	event->pid = id >> 32;
	event->tid = (__u32)id;
	event->cause = cause;
	event->page_shift = page_shift;
	bpf_get_current_comm(event->comm, sizeof(event->comm));
	bpf_ringbuf_submit(event, wakeup_flags());
	return 0;
}

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

/* The thread's read context as plain values, usable in a bpf_loop callback. */
struct cause_hint {
	__u64 inode;
	__u32 cause;
	__u32 armed;
};

static __always_inline __u32 cause_for(const struct cause_hint *hint, __u64 inode)
{
	if (!want_cause)
		return CAUSE_UNKNOWN;
	if (hint->armed && hint->inode == inode)
		return hint->cause;
	return CAUSE_READ;
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
	struct cause_hint hint;
};

/*
 * Add the bytes [offset, offset + len) of the bvec starting at @page to the
 * walk's run, emitting the run first when this segment does not continue it.
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
	emit_page_run(run->inode, run->first, run->nr_pages, walk->ts_ns,
		      cause_for(&walk->hint, run->inode));
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
 * for the helper and sets use_bpf_loop; the verifier then drops the branch
 * not taken, so neither path needs the other's support.
 */
const volatile bool use_bpf_loop = true;

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

static __always_inline int handle_bio_queue(struct bio *bio)
{
	struct bio_walk walk = {};
	struct read_context *ctx;
	__u32 tid;

	if ((BPF_CORE_READ(bio, bi_opf) & REQ_OP_MASK) != 0 /* REQ_OP_READ */)
		return 0;
	if (!current_is_traced())
		return 0;
	walk.vecs = (__u64)BPF_CORE_READ(bio, bi_io_vec);
	walk.idx = BPF_CORE_READ(bio, bi_iter.bi_idx);
	walk.skip = BPF_CORE_READ(bio, bi_iter.bi_bvec_done);
	walk.left = BPF_CORE_READ(bio, bi_iter.bi_size);
	if (!walk.vecs || !walk.left)
		return 0;
	walk.ts_ns = bpf_ktime_get_ns();
	tid = current_tid();
	ctx = bpf_map_lookup_elem(&read_contexts, &tid);
	if (ctx) {
		walk.hint.inode = ctx->inode;
		walk.hint.cause = ctx->cause;
		walk.hint.armed = ctx->armed;
	}

	walk_bio(&walk);
	if (walk.run.inode)
		count(COUNTER_BIOS);
	emit_page_run(walk.run.inode, walk.run.first, walk.run.nr_pages, walk.ts_ns,
		      cause_for(&walk.hint, walk.run.inode));
	if (walk.left)
		count(COUNTER_LOST_LONG_BIO);
	return 0;
}

static __always_inline int handle_fork(struct task_struct *parent,
				       struct task_struct *child)
{
	__u32 parent_tid = BPF_CORE_READ(parent, pid);
	__u32 child_tid = BPF_CORE_READ(child, pid);
	__u8 one = 1;

	if (trace_all || !bpf_map_lookup_elem(&traced_tids, &parent_tid))
		return 0;
	/* --no-children still follows the process's own new threads. */
	if (!follow_children &&
	    BPF_CORE_READ(child, tgid) != BPF_CORE_READ(parent, tgid))
		return 0;
	if (bpf_map_update_elem(&traced_tids, &child_tid, &one, BPF_ANY))
		count(COUNTER_LOST_TASKS);
	return 0;
}

static __always_inline int handle_exit(struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);

	bpf_map_delete_elem(&traced_tids, &tid);
	bpf_map_delete_elem(&read_contexts, &tid);
	return 0;
}

/*
 * "cause" bookkeeping. A trigger (sync or async readahead, a fault) arms
 * the thread's context for one inode; the bios that follow for that inode
 * take its cause. A readahead window with no trigger before it is forced
 * readahead (readahead(2), WILLNEED). filemap_get_pages() ends a read()'s
 * batch, which disarms the context so that a later plain ->read_folio is
 * not blamed on an old readahead.
 */
static __always_inline bool armed_for(const struct read_context *ctx, struct inode *inode)
{
	return ctx && ctx->armed && ctx->inode == (__u64)inode;
}

/* Arm @tid's context for @inode; readahead done by a fault stays a fault. */
static __always_inline void arm_read_context(__u32 tid, struct read_context *ctx,
					     struct inode *inode, __u32 cause)
{
	struct read_context fresh = { .inode = (__u64)inode, .cause = cause, .armed = 1 };

	if (armed_for(ctx, inode) && ctx->cause == CAUSE_FAULT)
		return;
	bpf_map_update_elem(&read_contexts, &tid, &fresh, BPF_ANY);
}

/* The current thread's id and read context (may be NULL); false if untraced. */
static __always_inline bool traced_thread(__u32 *tid, struct read_context **ctx)
{
	if (!current_is_traced())
		return false;
	*tid = current_tid();
	*ctx = bpf_map_lookup_elem(&read_contexts, tid);
	return true;
}

static __always_inline int note_ra_trigger(struct inode *inode, __u32 cause)
{
	struct read_context *ctx;
	__u32 tid;

	if (traced_thread(&tid, &ctx))
		arm_read_context(tid, ctx, inode, cause);
	return 0;
}

static __always_inline int note_ra_window(struct inode *inode)
{
	struct read_context *ctx;
	__u32 tid;

	if (traced_thread(&tid, &ctx) && !armed_for(ctx, inode))
		arm_read_context(tid, ctx, inode, CAUSE_FORCED_RA);
	return 0;
}

static __always_inline int note_read_batch_done(struct address_space *mapping)
{
	struct read_context *ctx;
	__u32 tid;

	if (traced_thread(&tid, &ctx) && ctx &&
	    ctx->inode == (__u64)BPF_CORE_READ(mapping, host))
		ctx->armed = 0;
	return 0;
}

/*
 * Every program twice, from one line: as tp_btf (typed arguments, preferred)
 * and as raw_tp (for kernels that refuse tp_btf). User space loads one set.
 */
#define TRACEPOINT_PROGRAMS(name, tracepoint, body, ...)			\
	SEC("tp_btf/" tracepoint)						\
	int BPF_PROG(btf_##name, __VA_ARGS__) { return body; }			\
	SEC("raw_tp/" tracepoint)						\
	int BPF_PROG(raw_##name, __VA_ARGS__) { return body; }

TRACEPOINT_PROGRAMS(bio_queue, "block_bio_queue", handle_bio_queue(bio),
		    struct bio *bio)
TRACEPOINT_PROGRAMS(fork, "sched_process_fork", handle_fork(parent, child),
		    struct task_struct *parent, struct task_struct *child)
TRACEPOINT_PROGRAMS(exit, "sched_process_exit", handle_exit(task),
		    struct task_struct *task)
TRACEPOINT_PROGRAMS(sync_ra, "page_cache_sync_ra",
		    note_ra_trigger(inode, CAUSE_SYNC_RA), struct inode *inode)
TRACEPOINT_PROGRAMS(async_ra, "page_cache_async_ra",
		    note_ra_trigger(inode, CAUSE_ASYNC_RA), struct inode *inode)
TRACEPOINT_PROGRAMS(ra_unbounded, "page_cache_ra_unbounded",
		    note_ra_window(inode), struct inode *inode)
TRACEPOINT_PROGRAMS(ra_order, "page_cache_ra_order",
		    note_ra_window(inode), struct inode *inode)
TRACEPOINT_PROGRAMS(fault, "mm_filemap_fault",
		    note_ra_trigger(BPF_CORE_READ(mapping, host), CAUSE_FAULT),
		    struct address_space *mapping)
TRACEPOINT_PROGRAMS(get_pages, "mm_filemap_get_pages",
		    note_read_batch_done(mapping), struct address_space *mapping)

char LICENSE[] SEC("license") = "GPL";
