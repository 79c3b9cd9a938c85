/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A module of the page-access engine (page_access.bpf.h), on fault_around:
 * what is resolved after the fact. A fault that left no filemap event (a
 * silent fault), and the large folio of a fault filemap_fault() served,
 * read from the page tables at the thread's next system call or fault;
 * the entry points of a fault starting and of a thread ending.
 *
 * Invariants: a thread's last fault is resolved at its next system call or
 * fault, or counted lost (on_fault_lost()) when its VMA's lookup finds the
 * lock busy; a fault counts its page once, whichever path resolves it.
 */
#ifndef PAGETRACE_FAULT_STATE_BPF_H
#define PAGETRACE_FAULT_STATE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "thread_storage.bpf.h"
#include "scratch.bpf.h"
#include "page_math.bpf.h"
#include "page_state.bpf.h"
#include "sinks.bpf.h"
#include "page_cache_walk.bpf.h"
#include "read_calls.bpf.h"
#include "vma_lookup.bpf.h"
#include "fault_around.bpf.h"

/*
 * A fault that fault-around serves by mapping a whole PMD-sized folio
 * (filemap_map_pages() -> filemap_map_pmd(), with large folios in the page
 * cache: seen on 7.3) returns before filemap:mm_filemap_map_pages fires, and
 * never reaches filemap_fault(): it leaves no event. Such a fault is still
 * FAULT_STARTED at the thread's next system call (sys_enter; exit and
 * exit_group too, while its memory is still mapped) or next fault: then
 * its page, if it is a file's and in the page cache, is the access that
 * fault-around served. Anonymous faults, most faults, stay FAULT_STARTED
 * too: the thread's last anonymous VMA and its last file's are remembered
 * (thread_fault_vma()), so that the next faults in them cost no lookup.
 */

/* A PMD-sized folio, the largest the page cache holds: 8 chunks. */
#define FOLIO_CHUNKS	8

/*
 * Of chunk @key, the pages of the folio [first, last], besides the
 * fault's, that no access or map accounts for yet.
 */
static __always_inline __u64 folio_chunk_unknown(struct page_chunk_key *key, __u64 first,
						 __u64 last, __u64 fault_index)
{
	__u64 base = key->chunk << CHUNK_SHIFT, unknown = range_mask(key->chunk, first, last);
	struct page_chunk *state = chunk_state(key, false);

	if (fault_index >= base && fault_index < base + CHUNK_PAGES)
		unknown &= ~(1ULL << (fault_index - base));
	return unknown & ~(state ? state->accessed | state->mapped : 0);
}

/*
 * Does @folio, of @nr pages, hold a page besides the fault's that no
 * access or map accounts for yet? Only then can its page tables tell
 * anything new, and only then is its VMA looked up: most large folios
 * that filemap_fault() serves were accounted for by an earlier fault or
 * read. A folio past FOLIO_CHUNKS is always looked at. A global
 * function, on the walk in ROOM_FOLIO (as walk_chunk() on its room):
 * verified once, its frame off the deepest call chain.
 */
__noinline int folio_has_unknown_pages(__u64 folio, __u64 nr, __u64 fault_index)
{
	struct walk_room_slot *slot;
	struct chunk_walk *walk;
	__u64 first = 0, last;

	bpf_probe_read_kernel(&first, sizeof(first), (void *)folio + page_index_offset());
	last = first + nr - 1;
	if ((last >> CHUNK_SHIFT) - (first >> CHUNK_SHIFT) >= FOLIO_CHUNKS)
		return 1;
	slot = bpf_map_lookup_elem(&walk_room, &walk_room_keys[ROOM_FOLIO]);
	if (!slot)
		return 1;
	walk = &slot->value;
#pragma clang loop unroll(disable)
	for (__u64 c = 0; c < FOLIO_CHUNKS; c++) {
		walk->key.chunk = (first >> CHUNK_SHIFT) + c;
		if (walk->key.chunk > last >> CHUNK_SHIFT)
			break;
		if (folio_chunk_unknown(&walk->key, first, last, fault_index))
			return 1;
	}
	return 0;
}

/*
 * A fault that filemap_fault() served: finish_fault() maps a PMD-sized
 * folio whole with do_set_pmd() after it (a folio fault-around skipped,
 * e.g. one marked for readahead), and no event says so. Once the fault
 * has ended, the folio's other pages are read from the page tables, as
 * fault-around's are (tests/test_pmd_mapped_faults.py: the last 2 MiB of
 * a file mapped with MADV_HUGEPAGE, 511 pages uncounted before). A global
 * function: inlined, its walk's frame took the sys_enter program's call
 * chain to 544 bytes, over the 512 of kernels before v6.13 (6.1 refused it).
 */
static __always_inline void map_fault_folio_with(struct chunk_walk *walk)
{
	struct thread_access *ta = thread_access(false);
	struct address_space *mapping;
	struct vma_lookup lookup = {};
	unsigned long folio;
	__u64 index, nr;

	if (!ta)
		return;
	mapping = (struct address_space *)ta->fault_mapping;
	lookup.address = ta->fault_address;
	index = ta->fault_index;
	ta->fault_folio_check = 0;
	folio = folio_at(mapping, index);
	if (!lookup.address || !folio || (nr = folio_pages((const struct folio *)folio)) < 2)
		return;
	start_walk(walk, mapping, OP_MAP, index, index);
	if (!folio_has_unknown_pages(folio, nr, index))
		return;
	if (fault_vma(ta, &lookup, false) == -BPF_EBUSY && !lookup.end)
		on_fault_lost();	/* which pages its folio's PMD mapped is not known */
	if (!lookup.end)
		return;
	if (lookup.mapping != (__u64)mapping || lookup.index != index)
		return;	/* not this fault's page (a kernel-mode or remote fault) */
	page_access_map_whole_folios(walk, index, index, &lookup);
}

__noinline int map_fault_folio(void)
{
	struct chunk_walk *walk = walk_room_take(ROOM_FOLIO);

	if (!walk) {	/* nested on this CPU: the folio's other pages are not read */
		on_fault_lost();
		return 0;
	}
	map_fault_folio_with(walk);
	walk_room_give(walk);
	return 0;
}

/*
 * Of chunk @key, @mapped the pages the page tables map: the fault's page
 * is its access when @account (as chunk_map() counts it), the others are
 * mapped ones unless known already.
 */
static __always_inline void map_chunk_from_ptes(struct inode *inode, struct page_chunk_key *key,
						__u64 mapped, __u64 fault_index, bool account)
{
	__u64 base = key->chunk << CHUNK_SHIFT, fault_bit = 0, new_map;
	struct page_chunk *state;
	__u32 hits = 0, misses = 0;
	__u64 first;

	if (fault_index >= base && fault_index < base + CHUNK_PAGES)
		fault_bit = 1ULL << (fault_index - base);
	state = chunk_state(key, mapped != 0);
	if (!state)
		return;
	if (account && (mapped & fault_bit)) {
		first = mark_accessed(state, fault_bit, &hits, &misses);
		on_access(inode, key,
			  &(struct chunk_access){ first, hits, misses, ACCESS_BY_FAULT });
	}
	new_map = mapped & ~fault_bit & ~state->accessed & ~state->mapped;
	state->mapped |= new_map;
	if (new_map)
		on_map(inode, key, new_map);
}

/*
 * Chunk @key of the folio [first, last] around fault_index: mapped whole
 * with the fault's page if the page tables map a page of it that no
 * access or map accounts for yet (the kernel maps a folio whole or not at
 * all; as chunk_mapped_whole() reads it).
 */
static __always_inline void map_folio_chunk_from_ptes(struct inode *inode,
						      struct page_chunk_key *key, __u64 first,
						      __u64 last, __u64 fault_index,
						      struct vma_lookup *vma)
{
	__u64 candidates = folio_chunk_unknown(key, first, last, fault_index), page;

	if (!candidates)
		return;
	page = (key->chunk << CHUNK_SHIFT) + lowest_bit(candidates);
	if (user_page_mapped(vma->start + ((page - vma->pgoff) << page_shift)))
		map_chunk_from_ptes(inode, key, candidates, fault_index, false);
}

/*
 * The silent fault at @address, once it has ended: its page, if a file's
 * and one fault-around maps, is its access, and the rest of its folio,
 * which a PMD mapped with it, is read from the page tables. A global
 * function: verified once, and with its own frame, not the walk of the
 * page cache's (with that walk, eight of these at sys_enter took the
 * program's stack past the 512 bytes of kernels before v6.13).
 */
__noinline int resolve_silent(__u64 address)
{
	struct thread_access *ta = thread_access(false);
	struct vma_lookup lookup = { .address = address & -(1ULL << page_shift) };
	struct address_space *mapping;
	struct page_chunk_key *key;
	struct chunk_cache cache;
	__u64 first, last, nr, bit;
	struct inode *inode;
	unsigned long folio;
	long err;

	if (!ta)
		return 0;
	err = thread_fault_vma(ta, &lookup, false);
	if (err == -BPF_EBUSY)
		on_fault_lost();	/* a file's page or not: not known */
	if (err || !lookup.mapping)
		return 0;	/* anonymous (most), or no VMA there any more */
	mapping = (struct address_space *)lookup.mapping;
	bit = 1ULL << (lookup.index & (CHUNK_PAGES - 1));
	chunk_in_cache(mapping, lookup.index >> CHUNK_SHIFT, bit, bit, &cache);
	if (!(cache.mappable & bit))
		return 0;
	inode = BPF_CORE_READ(mapping, host);
	key = &ta->silent_key;
	file_id_of(inode, &key->file);
	key->chunk = lookup.index >> CHUNK_SHIFT;
	map_chunk_from_ptes(inode, key, bit, lookup.index, true);
	/* The folio's other pages, which the PMD mapped with it. */
	folio = folio_at(mapping, lookup.index);
	if (!folio || (nr = folio_pages((const struct folio *)folio)) < 2)
		return 0;
	bpf_probe_read_kernel(&first, sizeof(first), (void *)folio + page_index_offset());
	last = first + nr - 1;
	if (first < lookup.pgoff || last - lookup.pgoff >= (lookup.end - lookup.start) >> page_shift)
		return 0;	/* not inside the VMA: never mapped whole */
#pragma clang loop unroll(disable)
	for (__u64 c = 0; c < FOLIO_CHUNKS; c++) {
		key->chunk = (first >> CHUNK_SHIFT) + c;
		if (key->chunk > last >> CHUNK_SHIFT)
			break;
		map_folio_chunk_from_ptes(inode, key, first, last, lookup.index, &lookup);
	}
	return 0;
}

static __always_inline void resolve_silent_fault(struct thread_access *ta)
{
	if (ta->fault_folio_check && ta->fault_state == FAULT_RESOLVED)
		map_fault_folio();
	if (ta->fault_state != FAULT_STARTED || !ta->fault_address)
		return;
	ta->fault_state = FAULT_NONE;
	resolve_silent(ta->fault_address);
}

/*
 * sys_enter of a traced thread: its last fault has ended, so a silent one
 * is resolved here.
 * Then a call that may map a file is counted: the faults before it were
 * resolved against the VMAs before it.
 */
static __always_inline void page_access_syscall_starts(long id)
{
	struct thread_access *ta = thread_access(false);

	if (ta)
		resolve_silent_fault(ta);
	if (may_map_a_file(id))
		__sync_fetch_and_add(&mapping_calls, 1);
}

/*
 * task->pagefault_disabled as a fault's tracepoint sees it when the kernel
 * will handle the fault: a user-mode fault always is one. Kernels count
 * their own pagefault_disable() around tracepoints in it or not (this
 * VM's 6.18: 1), so it is learnt from user-mode faults, not assumed; -1
 * until the first.
 */
int handled_fault_depth = -1;

/*
 * A kernel-mode fault taken with page faults disabled beyond that depth
 * (do_user_addr_fault() gives up on it: faulthandler_disabled()) maps
 * nothing and is no access of the thread's: bpf_probe_read_user() of
 * user_page_mapped(), of another tool beside this one (cachestat beside
 * cachetop, each with a map_pages program of its own), or the kernel's own
 * nofault reads. Taken for the thread's fault, it replaced the fault in
 * progress (docs/lab/fault-path-cases.md, "Kernel-mode faults with page faults
 * disabled").
 */
static __always_inline bool fault_will_be_handled(bool user_mode)
{
	__s32 depth = BPF_CORE_READ(current_task(), pagefault_disabled);

	if (user_mode) {
		if (depth != handled_fault_depth)
			handled_fault_depth = depth;
		return true;
	}
	return handled_fault_depth < 0 || depth <= handled_fault_depth;
}

/* exceptions:page_fault_user/kernel: a new fault starts. */
static __always_inline void page_access_fault_start(__u64 address, bool user_mode)
{
	struct thread_access *ta;

	if (!fault_will_be_handled(user_mode))
		return;
	ta = thread_access(true);
	if (!ta)
		return;
	resolve_silent_fault(ta);
	ta->fault_address = address;
	ta->fault_state = FAULT_STARTED;
	ta->fault_expects_read = 0;
	ta->fault_folio_check = 0;
}

/*
 * sched_process_exit, in the exiting thread: task storage goes with its
 * task, a hash entry does not.
 */
static __always_inline void page_access_exit(__u32 tid)
{
	thread_storage_forget(&thread_accesses, tid);
}

#endif /* PAGETRACE_FAULT_STATE_BPF_H */
