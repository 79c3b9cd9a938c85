// SPDX-License-Identifier: GPL-2.0
/*
 * core_btf: the kernel's BTF cut down to what an object's CO-RE relocations
 * can look up (core_btf.h).
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <bpf/btf.h>
#include "core_btf.h"

#define NAME_SLOTS	4096	/* a power of two, well above an object's named types */

/* Section @name of the ELF object @elf, as this machine's byte order reads it; or NULL. */
static const void *elf_section(const void *elf, size_t size, const char *name, size_t *len)
{
	const Elf64_Ehdr *eh = elf;
	const Elf64_Shdr *sh, *names;
	const unsigned char native = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB :
									     ELFDATA2MSB;

	if (size < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != native ||
	    eh->e_shentsize != sizeof(*sh) || eh->e_shoff > size ||
	    eh->e_shnum > (size - eh->e_shoff) / sizeof(*sh) || eh->e_shstrndx >= eh->e_shnum)
		return NULL;
	sh = (const Elf64_Shdr *)((const char *)elf + eh->e_shoff);
	names = &sh[eh->e_shstrndx];
	if (names->sh_offset > size || names->sh_size > size - names->sh_offset)
		return NULL;
	for (int i = 0; i < eh->e_shnum; i++) {
		const char *s = (const char *)elf + names->sh_offset + sh[i].sh_name;

		if (sh[i].sh_name >= names->sh_size || sh[i].sh_offset > size ||
		    sh[i].sh_size > size - sh[i].sh_offset ||
		    strnlen(s, names->sh_size - sh[i].sh_name) != strlen(name) ||
		    memcmp(s, name, strlen(name)))
			continue;
		*len = sh[i].sh_size;
		return (const char *)elf + sh[i].sh_offset;
	}
	return NULL;
}

/*
 * The length of @name without its flavour, the "___suffix" CO-RE ignores
 * (the last "X___Y", X and Y not underscores, splits it), as libbpf reads it.
 */
static size_t essential_length(const char *name)
{
	size_t n = strlen(name);

	for (size_t i = n >= 5 ? n - 5 + 1 : 0; i-- > 0;)
		if (name[i] != '_' && !strncmp(name + i + 1, "___", 3) && name[i + 4] != '_')
			return i + 1;
	return n;
}

/* The essential names of an object's own types: an open-addressed set. */
struct name_set {
	const char *name[NAME_SLOTS];
	size_t len[NAME_SLOTS];
};

static unsigned int name_hash(const char *s, size_t len)
{
	unsigned int h = 2166136261u;	/* FNV-1a */

	while (len--)
		h = (h ^ (unsigned char)*s++) * 16777619u;
	return h;
}

/* Add (@add) or find @name's essential part; false when the set is full or it is absent. */
static bool name_set_has(struct name_set *set, const char *name, bool add)
{
	size_t len = essential_length(name);
	unsigned int slot = name_hash(name, len);

	for (int probe = 0; probe < NAME_SLOTS; probe++, slot++) {
		slot &= NAME_SLOTS - 1;
		if (!set->name[slot]) {
			if (add) {
				set->name[slot] = name;
				set->len[slot] = len;
			}
			return add;
		}
		if (set->len[slot] == len && !memcmp(set->name[slot], name, len))
			return true;
	}
	return false;
}

/* Kinds a CO-RE relocation can look a type up by, by name. */
static bool named_kind(const struct btf_type *t)
{
	switch (btf_kind(t)) {
	case BTF_KIND_FUNC: case BTF_KIND_VAR: case BTF_KIND_DATASEC: case BTF_KIND_DECL_TAG:
		return false;
	default:
		return t->name_off != 0;
	}
}

/* The types @t holds by value, into @stack; how many. A pointer holds none. */
static int held_types(const struct btf_type *t, __u32 *stack)
{
	int n = 0;

	switch (btf_kind(t)) {
	case BTF_KIND_TYPEDEF: case BTF_KIND_VOLATILE: case BTF_KIND_CONST:
	case BTF_KIND_RESTRICT: case BTF_KIND_TYPE_TAG:
		stack[n++] = t->type;
		break;
	case BTF_KIND_ARRAY:
		stack[n++] = btf_array(t)->type;
		stack[n++] = btf_array(t)->index_type;
		break;
	case BTF_KIND_STRUCT: case BTF_KIND_UNION:
		for (int i = 0; i < btf_vlen(t); i++)
			stack[n++] = btf_members(t)[i].type;
		break;
	case BTF_KIND_FUNC_PROTO:
		stack[n++] = t->type;
		for (int i = 0; i < btf_vlen(t); i++)
			stack[n++] = btf_params(t)[i].type;
		break;
	}
	return n;
}

/* Mark in @kept every type @root holds by value, @root included. */
static int keep_held(const struct btf *vmlinux, __u32 root, __u32 *kept, __u32 *stack,
		     __u32 stack_size)
{
	__u32 depth = 0;

	stack[depth++] = root;
	while (depth) {
		__u32 id = stack[--depth];
		const struct btf_type *t = btf__type_by_id(vmlinux, id);

		if (!id || kept[id] || !t)
			continue;
		kept[id] = 1;
		if (stack_size - depth < 0x10000 + 2)	/* room for a struct's members */
			return -E2BIG;
		depth += held_types(t, stack + depth);
	}
	return 0;
}

/* Which of @vmlinux's @n types to keep for the object whose BTF is @local: kept[id] != 0. */
static int choose_types(const struct btf *vmlinux, const struct btf *local, __u32 n,
			__u32 *kept)
{
	struct name_set *names = calloc(1, sizeof(*names));
	__u32 stack_size = n + 0x10000 + 2, *stack = calloc(stack_size, sizeof(*stack));
	int err = names && stack ? 0 : -ENOMEM;

	for (__u32 id = 1; !err && id < btf__type_cnt(local); id++) {
		const struct btf_type *t = btf__type_by_id(local, id);

		if (named_kind(t) && !name_set_has(names, btf__name_by_offset(local, t->name_off), true))
			err = -E2BIG;
	}
	for (__u32 id = 1; !err && id < n; id++) {
		const struct btf_type *t = btf__type_by_id(vmlinux, id);

		if (named_kind(t) && !kept[id] &&
		    name_set_has(names, btf__name_by_offset(vmlinux, t->name_off), false))
			err = keep_held(vmlinux, id, kept, stack, stack_size);
	}
	free(names);
	free(stack);
	return err;
}

/* Point @t's references at the kept types' new ids (@new_id); a pointer at void when its target went. */
static void renumber(struct btf_type *t, const __u32 *new_id)
{
	switch (btf_kind(t)) {
	case BTF_KIND_PTR: case BTF_KIND_TYPEDEF: case BTF_KIND_VOLATILE: case BTF_KIND_CONST:
	case BTF_KIND_RESTRICT: case BTF_KIND_TYPE_TAG:
		t->type = new_id[t->type];
		break;
	case BTF_KIND_ARRAY:
		btf_array(t)->type = new_id[btf_array(t)->type];
		btf_array(t)->index_type = new_id[btf_array(t)->index_type];
		break;
	case BTF_KIND_STRUCT: case BTF_KIND_UNION:
		for (int i = 0; i < btf_vlen(t); i++)
			btf_members(t)[i].type = new_id[btf_members(t)[i].type];
		break;
	case BTF_KIND_FUNC_PROTO:
		t->type = new_id[t->type];
		for (int i = 0; i < btf_vlen(t); i++)
			btf_params(t)[i].type = new_id[btf_params(t)[i].type];
		break;
	}
}

/* A new BTF of @vmlinux's kept types, in their order, or NULL. */
static struct btf *copy_kept(const struct btf *vmlinux, __u32 n, __u32 *kept)
{
	struct btf *cut = btf__new_empty();
	__u32 next = 1;

	for (__u32 id = 1; cut && id < n; id++) {
		if (!kept[id])
			continue;
		if (btf__add_type(cut, vmlinux, btf__type_by_id(vmlinux, id)) < 0) {
			btf__free(cut);
			return NULL;
		}
		kept[id] = next++;	/* from here on: the new id */
	}
	for (__u32 id = 1; cut && id < next; id++)
		renumber((struct btf_type *)btf__type_by_id(cut, id), kept);
	return cut;
}

static int memory_file = -1;
static char memory_path[64];
/* The last cut: its types, the kernel's (0: none made). */
static __u32 cut_types, all_types;

const char *core_btf_reserve(void)
{
	core_btf_close();
	memory_file = memfd_create("pagetrace-core-btf", MFD_CLOEXEC);
	if (memory_file < 0)
		return NULL;
	snprintf(memory_path, sizeof(memory_path), "/proc/self/fd/%d", memory_file);
	return memory_path;
}

/* @btf's raw data in the memory file, made unless reserved; its path, or NULL. */
static const char *write_memory_file(const struct btf *btf)
{
	__u32 size;
	const char *data = btf__raw_data(btf, &size);
	ssize_t done = 0, n;

	if (!data || (memory_file < 0 && !core_btf_reserve()))
		return NULL;
	if (ftruncate(memory_file, 0) == 0)
		while (done < size && (n = pwrite(memory_file, data + done, size - done, done)) > 0)
			done += n;
	if (done != size) {
		core_btf_close();
		return NULL;
	}
	return memory_path;
}

const char *core_btf_path(const struct btf *vmlinux, const void *elf, size_t size)
{
	const char *knob = getenv("PAGETRACE_CORE_BTF"), *path = NULL;
	size_t len = 0;
	const void *raw = elf_section(elf, size, ".BTF", &len);
	struct btf *local = raw && len < 1U << 30 ? btf__new(raw, len) : NULL;
	__u32 n = btf__type_cnt(vmlinux), *kept = calloc(n, sizeof(*kept));
	struct btf *cut = NULL;

	if ((!knob || strcmp(knob, "full")) && local && kept && !choose_types(vmlinux, local, n, kept))
		cut = copy_kept(vmlinux, n, kept);
	if (cut)
		path = write_memory_file(cut);
	cut_types = path ? btf__type_cnt(cut) - 1 : 0;
	if (!path && memory_file >= 0)	/* reserved: it must hold a BTF */
		path = write_memory_file(vmlinux);
	if (!path)
		core_btf_close();
	all_types = n - 1;
	btf__free(cut);
	btf__free(local);
	free(kept);
	return path;
}

void core_btf_close(void)
{
	if (memory_file >= 0)
		close(memory_file);
	memory_file = -1;
}

void core_btf_print(FILE *f, const char *tool)
{
	if (cut_types)
		fprintf(f, "%s: load: CO-RE against %u of the kernel's %u types\n", tool, cut_types,
			all_types);
	else
		fprintf(f, "%s: load: CO-RE against the kernel's whole BTF (%u types)\n", tool,
			all_types);
}
