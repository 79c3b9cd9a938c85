/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The size of a BPF program as the verifier receives it: its own
 * instructions and those of every function it reaches through calls and
 * callback references (bpf_loop), each counted once, as libbpf appends
 * them, read from the object's ELF before anything is loaded.
 *
 * libbpf's bpf_program__insn_cnt() counts only the program's own section
 * before the load. What the verifier does with a program grows with the
 * linked code (tests/test_trace_cost.py checks the sizes against libbpf's
 * and how well they balance the halves of a split load, split_load.h).
 */
#ifndef PAGETRACE_LINKED_SIZE_H
#define PAGETRACE_LINKED_SIZE_H

#include <stddef.h>

struct linked_sizes;

/* The call graph of the BPF object in @elf (@size bytes, as a skeleton embeds it), or NULL. */
struct linked_sizes *linked_sizes_open(const void *elf, size_t size);
/* The linked size, in instructions, of the program whose function is @name; 0 if none. */
size_t linked_size(struct linked_sizes *ls, const char *name);
void linked_sizes_close(struct linked_sizes *ls);

#endif /* PAGETRACE_LINKED_SIZE_H */
