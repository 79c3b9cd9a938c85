/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Room for a walk's state off the verifier's 512-byte stack: one per-CPU
 * slot a kind of walk (SCRATCH_ROOM), the budget's answer to frames that
 * held a 100-byte walk each (docs/fault-path.md, "The verifier's budget").
 *
 * Invariant: a slot is held from its program's take to its give, on one CPU.
 * A program runs to its end there (tracepoints and kprobes with preemption
 * off, fentry and fexit with migration off), so a slot found busy is a
 * program nested in an interrupt on the same CPU, or one preempted there
 * (fentry/fexit, preempt=full): that event is counted lost by the caller,
 * never walked on another's state.
 */
#ifndef PAGETRACE_SCRATCH_BPF_H
#define PAGETRACE_SCRATCH_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

/*
 * ROOMS slots of one kind: NAME_take_room(room): room @room's slot,
 * zeroed, or NULL when busy; NAME_give(v): free it. The map is NAME, its
 * values struct NAME_slot, the slot itself their .value.
 */
#define SCRATCH_ROOMS(name, value_type, rooms)					\
	struct name##_slot {							\
		value_type value;						\
		__u32 busy;							\
	};									\
	struct {								\
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);			\
		__uint(max_entries, rooms);					\
		__type(key, __u32);						\
		__type(value, struct name##_slot);				\
	} name SEC(".maps");							\
	static __always_inline value_type *name##_take_room(__u32 room)	\
	{									\
		struct name##_slot *slot = bpf_map_lookup_elem(&name, &room);	\
										\
		if (!slot || slot->busy)					\
			return NULL;						\
		slot->busy = 1;							\
		__builtin_memset(&slot->value, 0, sizeof(slot->value));		\
		return &slot->value;						\
	}									\
	static __always_inline void name##_give(value_type *value)		\
	{									\
		((struct name##_slot *)value)->busy = 0;			\
	}

/* One slot: NAME_take(), the slot, zeroed, or NULL when busy; NAME_give(v): free it. */
#define SCRATCH_ROOM(name, value_type)						\
	SCRATCH_ROOMS(name, value_type, 1)					\
	static __always_inline value_type *name##_take(void)			\
	{									\
		return name##_take_room(0);					\
	}

#endif /* PAGETRACE_SCRATCH_BPF_H */
