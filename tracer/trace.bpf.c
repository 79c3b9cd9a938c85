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
#include "trace_events.h"
#include "core_fixes.bpf.h"
#include "page_math.bpf.h"
#include "sinks.bpf.h"
#include "traced_tasks.bpf.h"
#include "page_access.bpf.h"
#include "bio_pages.bpf.h"
#include "file_path.bpf.h"
#include "programs.bpf.h"
#include "arch_faults.bpf.h"
#include "filemap_kprobes.bpf.h"

const volatile bool want_cause = false;
/* --used: record first accesses and fault-around mappings (page_access.bpf.h). */
const volatile bool want_used = false;
/* Wake the reader only once this much is waiting; it also polls on a timer. */
const volatile __u64 wakeup_bytes = 1 << 20;

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

static __always_inline void on_task_lost(void)
{
	count(COUNTER_LOST_TASKS);
}

/*
 * blk-throttle (cgroup v1 blkio.throttle.*, v2 io.max) holds a bio over its
 * cgroup's limit, and its worker submits it later: submit_bio_noacct() calls
 * blk_throtl_bio() before submit_bio_noacct_nocheck(), which fires
 * block_bio_queue. So that bio arrives in a kworker, not in the traced
 * thread. It is credited to the traced command when the worker runs
 * blk_throtl_dispatch_work_fn (its address from /proc/kallsyms, 0 when
 * unknown: no credit) and the bio's cgroup is one a traced thread was seen
 * in. An untraced process in the same cgroup would be credited too.
 */
const volatile __u64 throttle_dispatch_fn = 0;

/*
 * The cause of a read no trigger explains: `read` for a traced thread's,
 * `-` for a bio blk-throttle held (no thread to ask why). Globals in .data,
 * not constants, so that the verifier sees an unknown value on both paths
 * and verifies the bio walk once for both (constants doubled the unrolled
 * walk of --no-bpf-loop past its limit).
 */
__u32 cause_of_thread_read = CAUSE_READ;
__u32 cause_of_held_bio = CAUSE_UNKNOWN;

/* include/linux/sched.h, unchanged since v2.6.36 (not in BTF: a #define) */
#define PF_WQ_WORKER	0x00000020

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);	/* the io controller's css of a traced thread */
	__type(value, __u8);
} traced_io_cgroups SEC(".maps");

static __always_inline __u64 io_css_of(struct task_struct *task)
{
	struct css_set *cgroups = BPF_CORE_READ(task, cgroups);
	__u64 css = 0;
	int id;

	if (!bpf_core_enum_value_exists(enum cgroup_subsys_id, io_cgrp_id) || !cgroups)
		return 0;
	id = bpf_core_enum_value(enum cgroup_subsys_id, io_cgrp_id);
	/* CGROUP_SUBSYS_COUNT is a #define, so the array's length comes from
	 * the running kernel's BTF, relocated to a constant at load. */
	if (id < 0 || id >= bpf_core_field_size(cgroups->subsys) / sizeof(cgroups->subsys[0]))
		return 0;
	bpf_core_read(&css, sizeof(css), &cgroups->subsys[id]);
	return css;
}

static __always_inline void on_thread_traced(struct task_struct *task)
{
	__u64 css;
	__u8 one = 1;

	if (!throttle_dispatch_fn || trace_all)
		return;
	css = io_css_of(task);
	if (css && !bpf_map_lookup_elem(&traced_io_cgroups, &css))
		bpf_map_update_elem(&traced_io_cgroups, &css, &one, BPF_ANY);
}

/*
 * Is this blk-throttle's worker submitting a bio held for a traced thread's
 * cgroup? @blkcg is the bio's (bio->bi_blkg->blkcg). Global, so verified
 * once on its own: inlined, its branches doubled the states of the
 * unrolled bio walk (--no-bpf-loop) past the verifier's limit.
 */
__noinline int throttled_for_traced(__u64 blkcg)
{
	/* Not bpf_get_current_task_btf(): v5.11. Every field below is probe-read. */
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct kthread *kthread;
	void *worker;
	__u64 css;

	if (!throttle_dispatch_fn || !blkcg || !(BPF_CORE_READ(task, flags) & PF_WQ_WORKER))
		return 0;
	kthread = task_kthread(task);
	worker = kthread ? BPF_CORE_READ(kthread, data) : NULL;
	if (!worker || (__u64)BPF_CORE_READ((struct worker *)worker, current_func) !=
		       throttle_dispatch_fn)
		return 0;
	css = blkcg + bpf_core_field_offset(struct blkcg, css);
	return bpf_map_lookup_elem(&traced_io_cgroups, &css) != NULL;
}

/* The sinks of file_path.bpf.h (sinks.bpf.h). */
static __always_inline void *events_reserve(__u64 size)
{
	return bpf_ringbuf_reserve(&events, size, 0);
}

static __always_inline void events_submit(void *event)
{
	bpf_ringbuf_submit(event, wakeup_flags());
}

static __always_inline void on_path_lost(void)
{
	count(COUNTER_LOST_PATH);
}

/*
 * The fields every record of trace_events.h ends with: the thread that caused it
 * and the page size.
 */
#define SET_THREAD_FIELDS(event, id)						\
	do {									\
		(event)->pid = (id) >> 32;					\
		(event)->tid = (__u32)(id);					\
		(event)->page_shift = page_shift;				\
		bpf_get_current_comm((event)->comm, sizeof((event)->comm));	\
	} while (0)

/* A pages event for @nr_pages pages from @first, its file left to the caller. */
static __always_inline struct pages_event *reserve_pages(__u64 first, __u64 nr_pages,
							 __u64 ts_ns, __u32 cause)
{
	struct pages_event *event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	__u64 id;

	if (!event) {
		count(COUNTER_LOST_RINGBUF);
		return NULL;
	}
	id = bpf_get_current_pid_tgid();
	event->kind = EVENT_PAGES;
	event->nr_pages = nr_pages;
	event->ts_ns = ts_ns;
	event->index = first;
	SET_THREAD_FIELDS(event, id);
	event->cause = cause;
	return event;
}

/* A record of pages [first, first + nr_pages) of @inode, whose id is @id. */
static __always_inline void emit_file_run(struct inode *inode, const struct file_id *id,
					  __u64 first, __u64 nr_pages, __u64 ts_ns, __u32 cause)
{
	struct pages_event *event;

	send_file_name(inode, id);
	event = reserve_pages(first, nr_pages, ts_ns, cause);
	if (!event)
		return;
	event->file = *id;
	bpf_ringbuf_submit(event, wakeup_flags());
}

__noinline int emit_page_run(__u64 inode_addr, __u64 first, __u64 nr_pages,
			     __u64 ts_ns, __u32 cause)
{
	struct inode *inode = (struct inode *)inode_addr;
	struct file_id id;

	if (!inode || !nr_pages)
		return 0;
	file_id_of(inode, &id);
	emit_file_run(inode, &id, first, nr_pages, ts_ns, cause);
	return 0;
}

/* Metadata: pages of device @dev (file id: the device, inode 0). */
__noinline int emit_metadata_run(__u32 dev, __u64 first, __u64 nr_pages, __u64 ts_ns)
{
	struct pages_event *event;

	if (!nr_pages)
		return 0;
	event = reserve_pages(first, nr_pages, ts_ns, CAUSE_METADATA);
	if (!event)
		return 0;
	event->file.dev = dev;
	event->file.generation = 0;
	event->file.ino = 0;
	bpf_ringbuf_submit(event, wakeup_flags());
	return 0;
}

/* The sinks of page_access.bpf.h: trace writes first accesses and mappings. */
static __always_inline void emit_marks(struct inode *inode, const struct page_chunk_key *key,
				       __u64 mask, __u32 record, __u32 how)
{
	struct marks_event *event;
	__u64 id;

	if (!mask)
		return;
	send_file_name(inode, &key->file);
	event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	if (!event) {
		count(COUNTER_LOST_RINGBUF);
		return;
	}
	id = bpf_get_current_pid_tgid();
	event->kind = EVENT_MARKS;
	event->record = record;
	event->ts_ns = bpf_ktime_get_ns();
	event->file = key->file;
	event->base = key->chunk << CHUNK_SHIFT;
	event->mask = mask;
	SET_THREAD_FIELDS(event, id);
	event->how = how;
	bpf_ringbuf_submit(event, wakeup_flags());
}

static __always_inline void on_access(struct inode *inode, const struct page_chunk_key *key,
				      const struct chunk_access *access)
{
	emit_marks(inode, key, access->first, RECORD_ACCESS, access->how);
}

static __always_inline void on_map(struct inode *inode, const struct page_chunk_key *key,
				   __u64 new_mask)
{
	emit_marks(inode, key, new_mask, RECORD_MAP, ACCESS_BY_FAULT);
}

static __always_inline void on_state_full(void)
{
	count(COUNTER_LOST_PAGE_STATE);
}

static __always_inline void on_walk_cut_short(void)
{
	count(COUNTER_LOST_LONG_RANGE);
}

static __always_inline void on_fault_lost(void)
{
	count(COUNTER_LOST_FAULT);
}

static __always_inline __u32 cause_for(const struct bio_walk *walk, __u64 inode)
{
	const struct read_context *hint = &walk->hint;

	if (!want_cause)
		return CAUSE_UNKNOWN;
	if (hint->armed && hint->inode == inode)
		return hint->cause;
	return walk->unexplained_cause;
}

/* The sink of bio_pages.bpf.h: a run of pages read from storage becomes a record. */
static __always_inline void on_read_run(struct bio_walk *walk)
{
	if (walk->run.metadata) {
		emit_metadata_run(walk->run.dev, walk->run.first, walk->run.nr_pages, walk->ts_ns);
		return;
	}
	emit_page_run(walk->run.inode, walk->run.first, walk->run.nr_pages, walk->ts_ns,
		      cause_for(walk, walk->run.inode));
}

/*
 * tp_btf: a bio of one file vector as one record (one_file_vector()), in a
 * frame of its own, off the chain of the generic walk's frames.
 */
static __noinline bool emit_one_file_vector(struct bio *bio, struct bio_walk *walk)
{
	struct file_id id;

	if (!one_file_vector(bio, walk, &id))
		return false;
	emit_file_run((struct inode *)walk->run.inode, &id, walk->run.first,
		      walk->run.nr_pages, walk->ts_ns, cause_for(walk, walk->run.inode));
	return true;
}

static __always_inline void walk_queued_bio(struct bio *bio, struct bio_walk *walk,
					    struct read_context *ctx, bool trusted, bool may_loop)
{
	if (!(trusted ? start_trusted_bio_walk(bio, walk) : start_bio_walk(bio, walk)))
		return;
	walk->ts_ns = bpf_ktime_get_ns();
	if (ctx)
		walk->hint = *ctx;
	walk->unexplained_cause = ctx || trace_all ? cause_of_thread_read : cause_of_held_bio;
	if (trusted && emit_one_file_vector(bio, walk))
		return;
	walk_bio(walk, may_loop);
	on_read_run(walk);	/* the last run */
	if (walk->left)
		count(COUNTER_LOST_LONG_BIO);
}

static __always_inline int handle_bio_queue(struct bio *bio, bool trusted, bool may_loop)
{
	struct read_context *ctx = traced_thread();
	struct bio_walk *walk;

	if (!trace_all && !ctx &&
	    !throttled_for_traced((__u64)BPF_CORE_READ(bio, bi_blkg, blkcg)))
		return 0;
	walk = bio_walk_room_take();
	if (!walk) {	/* nested on this CPU (scratch.bpf.h): the bio is not walked */
		count(COUNTER_LOST_LONG_BIO);
		return 0;
	}
	walk_queued_bio(bio, walk, ctx, trusted, may_loop);
	bio_walk_room_give(walk);
	return 0;
}

static __always_inline int handle_exit(struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);

	forget_task(tid);
	filemap_calls_exit(tid);
	if (want_used)
		page_access_exit(tid);
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

/* Arm @ctx for @inode; readahead done by a fault stays a fault. */
static __always_inline void arm_read_context(struct read_context *ctx, struct inode *inode,
					     __u32 cause)
{
	if (!ctx || (armed_for(ctx, inode) && ctx->cause == CAUSE_FAULT))
		return;
	ctx->inode = (__u64)inode;
	ctx->cause = cause;
	ctx->armed = 1;
}

static __always_inline int note_ra_trigger(struct inode *inode, __u32 cause)
{
	arm_read_context(traced_thread(), inode, cause);
	return 0;
}

static __always_inline int note_ra_window(struct inode *inode)
{
	struct read_context *ctx = traced_thread();

	if (!armed_for(ctx, inode))
		arm_read_context(ctx, inode, CAUSE_FORCED_RA);
	return 0;
}

/* The read family and faults: cause bookkeeping, and --used accesses. */
static __always_inline int handle_get_pages(struct address_space *mapping, __u64 index, __u64 last)
{
	struct read_context *ctx = traced_thread();

	if (!trace_all && !ctx)
		return 0;
	/* filemap_get_pages() ended a batch of a read call: disarm. */
	if (ctx && ctx->inode == (__u64)BPF_CORE_READ(mapping, host))
		ctx->armed = 0;
	if (want_used)
		page_access_read_call(mapping, index, last);
	return 0;
}

static __always_inline int handle_fault(struct address_space *mapping, __u64 index)
{
	struct read_context *ctx = traced_thread();

	if (!trace_all && !ctx)
		return 0;
	arm_read_context(ctx, BPF_CORE_READ(mapping, host), CAUSE_FAULT);
	if (want_used && !faults_from_ptes)
		page_access_fault(mapping, index);
	return 0;
}

/* By hand: tp_btf's bio is a trusted pointer, read without probe reads. */
SEC("tp_btf/block_bio_queue")
int BPF_PROG(btf_bio_queue, struct bio *bio) { return handle_bio_queue(bio, true, true); }
SEC("raw_tp/block_bio_queue")
int BPF_PROG(raw_bio_queue, struct bio *bio) { return handle_bio_queue(bio, false, true); }
/*
 * Before v5.11 "block: remove the request_queue argument to the block:
 * tracepoints" (Christoph Hellwig, 2020) the bio came second. User space
 * counts the tracepoint's arguments in BTF and loads one form. Those
 * kernels have no bpf_loop, and refuse a reference to its callback.
 */
SEC("tp_btf/block_bio_queue")
int BPF_PROG(btf_bio_queue_after_queue, struct request_queue *q, struct bio *bio)
{
	return handle_bio_queue(bio, true, false);
}
SEC("raw_tp/block_bio_queue")
int BPF_PROG(raw_bio_queue_after_queue, struct request_queue *q, struct bio *bio)
{
	return handle_bio_queue(bio, false, false);
}
TRACEPOINT_PROGRAMS(fork, "sched_process_fork", (follow_fork(parent, child), 0),
		    struct task_struct *parent, struct task_struct *child)
TRACEPOINT_PROGRAMS(exit, "sched_process_exit", handle_exit(task),
		    struct task_struct *task)
/*
 * A command trace starts (or any traced exec) is seen here before it reads:
 * its state is made and its cgroup noted (on_thread_traced), so that bios
 * blk-throttle holds from its very first read are credited. Without -x or
 * --used no other program of the thread's own may run before such a bio.
 */
TRACEPOINT_PROGRAMS(exec, "sched_process_exec", (traced_thread(), 0),
		    struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
TRACEPOINT_PROGRAMS(sync_ra, "page_cache_sync_ra",
		    note_ra_trigger(inode, CAUSE_SYNC_RA), struct inode *inode)
TRACEPOINT_PROGRAMS(async_ra, "page_cache_async_ra",
		    note_ra_trigger(inode, CAUSE_ASYNC_RA), struct inode *inode)
TRACEPOINT_PROGRAMS(ra_unbounded, "page_cache_ra_unbounded",
		    note_ra_window(inode), struct inode *inode)
TRACEPOINT_PROGRAMS(ra_order, "page_cache_ra_order",
		    note_ra_window(inode), struct inode *inode)
TRACEPOINT_PROGRAMS(fault, "mm_filemap_fault", handle_fault(mapping, index),
		    struct address_space *mapping, unsigned long index)
TRACEPOINT_PROGRAMS(get_pages, "mm_filemap_get_pages", handle_get_pages(mapping, index, last),
		    struct address_space *mapping, unsigned long index, unsigned long last)

PAGE_ACCESS_PROGRAMS()
PTE_HOOK_PROGRAMS()
FILEMAP_FUNCTION_PROGRAMS()
FILEMAP_KPROBE_PROGRAMS()
ARCH_FAULT_PROGRAMS()

char LICENSE[] SEC("license") = "GPL";
