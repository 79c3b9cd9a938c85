// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel side of cachestat and cachetop: page-cache hits, misses, dirties
 * and fault-around mappings, system-wide or for traced tasks, in total, per
 * process, per file and per cgroup (the cgroup2 hierarchy's, by id).
 *
 * The words are those of page_access.bpf.h, which does the counting: an
 * access is a page a read call asked for or the faulting page of an mmap
 * fault; a miss is the first access to a page read from storage while
 * tracing; every other access is a hit. Reads from storage are seen by any
 * task (a page that another task's readahead brought in is still a miss for
 * the first traced task that uses it), through the same bio walk as trace
 * (bio_pages.bpf.h). Dirties come from writeback:writeback_dirty_folio,
 * which fires when a clean folio turns dirty; a write is never a miss.
 *
 * Every program exists as tp_btf and raw_tp; user space (cache_load.c)
 * loads one set.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "cache.h"
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

/* cachetop: keep counts per process (tgid), per file, per cgroup. */
const volatile bool per_process = false;
const volatile bool per_file = false;
const volatile bool per_cgroup = false;
/* Wake the reader only once this much is waiting; it also polls on a timer. */
const volatile __u64 wakeup_bytes = 1 << 16;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_CACHE_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);		/* tgid */
	__type(value, struct process_counts);
} processes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct file_id);
	__type(value, struct cache_counts);
} files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);		/* cgroup2 id (bpf_get_current_cgroup_id) */
	__type(value, struct cache_counts);
} cgroups SEC(".maps");

/* File names, for cachetop --files (struct path_event). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

static __always_inline void add(__u32 slot, __u64 n)
{
	__u64 *value;

	if (!n)
		return;
	value = bpf_map_lookup_elem(&totals, &slot);
	if (value)
		*value += n;
}

static __always_inline __u64 wakeup_flags(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ?
		BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
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
	add(CACHE_LOST_PATH, 1);
}

/* Misses are counted by any task's reads: nothing to know of a new thread. */
static __always_inline void on_thread_traced(struct task_struct *task)
{
	(void)task;
}

static __always_inline void on_task_lost(void)
{
	add(CACHE_LOST_TASKS, 1);
}

static __always_inline struct process_counts *current_process(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct process_counts *entry = bpf_map_lookup_elem(&processes, &tgid);
	struct process_counts fresh = {};

	if (entry) {
		/* After an exec the name changes: keep the latest. */
		bpf_get_current_comm(entry->comm, sizeof(entry->comm));
		return entry;
	}
	fresh.uid = (__u32)bpf_get_current_uid_gid();
	bpf_get_current_comm(fresh.comm, sizeof(fresh.comm));
	if (bpf_map_update_elem(&processes, &tgid, &fresh, BPF_NOEXIST) == -7 /* E2BIG */)
		add(CACHE_LOST_PROCESS, 1);
	return bpf_map_lookup_elem(&processes, &tgid);
}

static __always_inline struct cache_counts *file_counts(struct inode *inode,
							 const struct file_id *id)
{
	struct cache_counts *entry = bpf_map_lookup_elem(&files, id);
	struct cache_counts fresh = {};

	if (entry)
		return entry;
	send_file_name(inode, id);
	if (bpf_map_update_elem(&files, id, &fresh, BPF_NOEXIST) == -7 /* E2BIG */)
		add(CACHE_LOST_FILE, 1);
	return bpf_map_lookup_elem(&files, id);
}

/* The current task's cgroup2 directory name, for user space to name it by. */
static __always_inline void send_cgroup_name(__u64 id)
{
	struct task_struct *task = current_task();
	struct cgroup_event *event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	const char *name;

	if (!event) {
		on_path_lost();
		return;
	}
	event->kind = CGROUP_EVENT_KIND;
	event->id = id;
	name = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, name);
	if (!name || bpf_probe_read_kernel_str(event->name, sizeof(event->name), name) < 0)
		event->name[0] = '\0';
	bpf_ringbuf_submit(event, wakeup_flags());
}

static __always_inline struct cache_counts *current_cgroup(void)
{
	__u64 id = bpf_get_current_cgroup_id();
	struct cache_counts *entry = bpf_map_lookup_elem(&cgroups, &id);
	struct cache_counts fresh = {};

	if (entry)
		return entry;
	if (bpf_map_update_elem(&cgroups, &id, &fresh, BPF_NOEXIST) == -7 /* E2BIG */)
		add(CACHE_LOST_CGROUP, 1);
	else
		send_cgroup_name(id);
	return bpf_map_lookup_elem(&cgroups, &id);
}

static __always_inline void count_in(struct cache_counts *c, const struct cache_counts *d)
{
	if (!c)
		return;
	__sync_fetch_and_add(&c->hits, d->hits);
	__sync_fetch_and_add(&c->misses, d->misses);
	__sync_fetch_and_add(&c->dirties, d->dirties);
	__sync_fetch_and_add(&c->mapped, d->mapped);
}

/* Add @delta to the totals, the current process, the file and the cgroup. */
static __always_inline void account(struct inode *inode, const struct file_id *id,
				    const struct cache_counts *delta)
{
	struct process_counts *process;

	add(CACHE_HITS, delta->hits);
	add(CACHE_MISSES, delta->misses);
	add(CACHE_DIRTIES, delta->dirties);
	add(CACHE_MAPPED, delta->mapped);
	if (per_process) {
		process = current_process();
		if (process)
			count_in(&process->counts, delta);
	}
	if (per_file)
		count_in(file_counts(inode, id), delta);
	if (per_cgroup)
		count_in(current_cgroup(), delta);
}

/* The sinks of page_access.bpf.h: cachestat and cachetop count. */
static __always_inline void on_access(struct inode *inode, const struct page_chunk_key *key,
				      const struct chunk_access *access)
{
	__u32 hits = access->hits, misses = access->misses;
	struct cache_counts delta = { .hits = hits, .misses = misses };

	if (hits || misses)
		account(inode, &key->file, &delta);
}

static __always_inline void on_map(struct inode *inode, const struct page_chunk_key *key,
				   __u64 new_mask)
{
	struct cache_counts delta = { .mapped = popcount64(new_mask) };

	account(inode, &key->file, &delta);
}

static __always_inline void on_state_full(void)
{
	add(CACHE_LOST_PAGE_STATE, 1);
}

static __always_inline void on_walk_cut_short(void)
{
	add(CACHE_LOST_LONG_RANGE, 1);
}

static __always_inline void on_fault_lost(void)
{
	add(CACHE_LOST_FAULT, 1);
}

/* The sink of bio_pages.bpf.h: pages read from storage are pending until accessed. */
static __always_inline void on_read_run(struct bio_walk *walk)
{
	page_access_read_from_storage((struct inode *)walk->run.inode, walk->run.first,
				      walk->run.nr_pages);
}

static __always_inline int handle_bio_queue(struct bio *bio)
{
	struct bio_walk *walk = bio_walk_room_take();

	if (!walk) {	/* nested on this CPU (scratch.bpf.h): the bio is not walked */
		add(CACHE_LOST_LONG_BIO, 1);
		return 0;
	}
	if (start_bio_walk(bio, walk)) {
		walk_bio(walk, true);
		on_read_run(walk);	/* the last run */
		if (walk->left)
			add(CACHE_LOST_LONG_BIO, 1);
	}
	bio_walk_room_give(walk);
	return 0;
}

static __always_inline int handle_dirty(struct folio *folio, struct address_space *mapping)
{
	struct cache_counts delta = {};
	struct file_id id = {};
	struct inode *inode;

	if (!current_is_traced() || !mapping)
		return 0;
	inode = BPF_CORE_READ(mapping, host);
	if (!inode || (BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFREG)
		return 0;
	file_id_of(inode, &id);
	delta.dirties = folio_pages(folio);
	account(inode, &id, &delta);
	return 0;
}

static __always_inline int handle_exit(struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);

	forget_task(tid);
	filemap_calls_exit(tid);
	page_access_exit(tid);
	return 0;
}

static __always_inline int handle_get_pages(struct address_space *mapping, __u64 index, __u64 last)
{
	if (current_is_traced())
		page_access_read_call(mapping, index, last);
	return 0;
}

static __always_inline int handle_fault(struct address_space *mapping, __u64 index)
{
	if (current_is_traced())
		page_access_fault(mapping, index);
	return 0;
}

TRACEPOINT_PROGRAMS(bio_queue, "block_bio_queue", handle_bio_queue(bio), struct bio *bio)
/* Before v5.11 the bio came second (trace.bpf.c). */
TRACEPOINT_PROGRAMS(bio_queue_after_queue, "block_bio_queue", handle_bio_queue(bio),
		    struct request_queue *q, struct bio *bio)
TRACEPOINT_PROGRAMS(fork, "sched_process_fork",
		    (follow_fork(parent, child), 0),
		    struct task_struct *parent, struct task_struct *child)
TRACEPOINT_PROGRAMS(exit, "sched_process_exit", handle_exit(task), struct task_struct *task)
TRACEPOINT_PROGRAMS(get_pages, "mm_filemap_get_pages", handle_get_pages(mapping, index, last),
		    struct address_space *mapping, unsigned long index, unsigned long last)
TRACEPOINT_PROGRAMS(fault, "mm_filemap_fault", handle_fault(mapping, index),
		    struct address_space *mapping, unsigned long index)
TRACEPOINT_PROGRAMS(dirty, "writeback_dirty_folio", handle_dirty(folio, mapping),
		    struct folio *folio, struct address_space *mapping)

PAGE_ACCESS_PROGRAMS()
PTE_HOOK_PROGRAMS()
FILEMAP_FUNCTION_PROGRAMS()
FILEMAP_KPROBE_PROGRAMS()
ARCH_FAULT_PROGRAMS()

char LICENSE[] SEC("license") = "GPL";
