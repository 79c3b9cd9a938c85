/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Send the name of a file to user space once (struct path_event), for
 * trace and cachetop, through the tool's ring buffer (the sinks
 * events_reserve() and events_submit(); on_path_lost() when it is full:
 * sinks.bpf.h).
 */
#ifndef PAGETRACE_FILE_PATH_BPF_H
#define PAGETRACE_FILE_PATH_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "file_path.h"
#include "core_fixes.bpf.h"
#include "sinks.bpf.h"

/* Files whose name was already sent, so that each name goes out once. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct file_id);
	__type(value, __u8);
} named_files SEC(".maps");

/*
 * The file this CPU last found named, so that a run of records for one file
 * (a fault storm, a long read) costs no named_files lookup. User space bumps
 * names_epoch whenever it deletes names from named_files, which voids these.
 */
struct last_named {
	struct file_id id;
	__u64 epoch;
	__u64 valid;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last_named);
} last_named_file SEC(".maps");

volatile __u64 names_epoch = 0;

static __always_inline bool same_file_id(const struct file_id *a, const struct file_id *b)
{
	return a->dev == b->dev && a->generation == b->generation && a->ino == b->ino;
}

/* The dentry an inode is known by: the first of its aliases. */
static __always_inline struct dentry *inode_dentry(struct inode *inode)
{
	struct hlist_node *first = BPF_CORE_READ(inode, i_dentry.first);

	if (!first)
		return NULL;
	return dentry_of_alias(first);
}

/*
 * Send the name of a file, leaf first, up to its filesystem's root; user
 * space maps the filesystem to its mount point. A global function, so the
 * verifier checks this walk once instead of at every call site. Returns 1
 * when user space has the name (sent now or before), 0 when it was lost.
 */
__noinline int emit_file_path(__u64 inode_addr, __u64 dev_generation, __u64 ino)
{
	struct inode *inode = (struct inode *)inode_addr;
	struct file_id id = { .dev = dev_generation >> 32, .generation = (__u32)dev_generation,
			      .ino = ino };
	struct path_event *event;
	struct dentry *dentry, *parent;
	__u32 depth = 0;
	__u8 one = 1;

	if (!inode)
		return 0;
	/* Look first: an LRU map's update takes a free node even when the key is there. */
	if (bpf_map_lookup_elem(&named_files, &id) ||
	    bpf_map_update_elem(&named_files, &id, &one, BPF_NOEXIST))
		return 1;	/* sent before */

	event = events_reserve(sizeof(*event));
	if (!event) {
		/* Forget it, so that the next read of the file tries again. */
		bpf_map_delete_elem(&named_files, &id);
		on_path_lost();
		return 0;
	}
	event->kind = PATH_EVENT_KIND;
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
	events_submit(event);
	return 1;
}

/*
 * The name of @inode, whose file id the caller already has (so that it is
 * read from the inode once per event, not twice): scalars, because a global
 * function takes no pointer to its caller's stack on every kernel.
 */
static __always_inline void send_file_name(struct inode *inode, const struct file_id *id)
{
	__u32 zero = 0;
	struct last_named *last = bpf_map_lookup_elem(&last_named_file, &zero);
	__u64 epoch = names_epoch;

	if (last && last->valid && last->epoch == epoch && same_file_id(&last->id, id))
		return;
	if (!emit_file_path((__u64)inode, ((__u64)id->dev << 32) | id->generation, id->ino))
		return;
	if (last) {
		last->id = *id;
		last->epoch = epoch;
		last->valid = 1;
	}
}

#endif /* PAGETRACE_FILE_PATH_BPF_H */
