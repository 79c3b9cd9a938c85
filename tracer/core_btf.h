/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel's BTF cut down to what a BPF object's CO-RE relocations can
 * look up, for libbpf to relocate against (btf_custom_path).
 *
 * libbpf finds each local type's candidates by a scan of every type of the
 * target BTF (over 100,000 in a distribution kernel's), once per local type
 * the object relocates, whether its programs load or not. The cut-down BTF
 * keeps every kernel type whose name is, without its ___flavour suffix, the
 * name of one of the object's own types, and, recursively, every type they
 * hold by value (members, array elements, typedefs, modifiers): all that a
 * field's offset, size, signedness or existence, an enum's value or a type's
 * size is read from. A pointer is kept as a pointer (its target kept only
 * where it is kept anyway, else void): libbpf takes any two pointers for
 * compatible fields. The relocated instructions are the same as against the
 * whole BTF (tests/test_trace_cost.py compares them). The kernel's own BTF
 * is still what tp_btf and fentry programs attach by. Not for an object that
 * relocates a kernel type's id (bpf_core_type_id_kernel: the ids are the
 * cut's) or matches types through pointers (bpf_core_type_matches).
 */
#ifndef PAGETRACE_CORE_BTF_H
#define PAGETRACE_CORE_BTF_H

#include <stddef.h>
#include <stdio.h>

struct btf;

/*
 * The cut-down @vmlinux for the BPF object in @elf (@size bytes, as a
 * skeleton embeds it), in a memory file: its path for btf_custom_path, or
 * NULL (then libbpf relocates against the whole BTF). PAGETRACE_CORE_BTF=full
 * (a test knob) asks for NULL.
 */
const char *core_btf_path(const struct btf *vmlinux, const void *elf, size_t size);
/*
 * The path core_btf_path() will give, before the cut is made, so that objects
 * may be opened meanwhile: the memory file, empty until then, and then
 * holding the cut or, failing that, the whole @vmlinux. NULL if none.
 */
const char *core_btf_reserve(void);
/* Close the memory file (once the object is loaded). */
void core_btf_close(void);
/* "TOOL: load: CO-RE against N of the kernel's M types" (or "... the whole BTF") on @f. */
void core_btf_print(FILE *f, const char *tool);

#endif /* PAGETRACE_CORE_BTF_H */
