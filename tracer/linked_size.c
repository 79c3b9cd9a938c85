// SPDX-License-Identifier: GPL-2.0
/*
 * linked_size: a BPF program's size with the functions it reaches
 * (linked_size.h), from the object's symbols and relocations.
 */
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <linux/bpf.h>
#include "linked_size.h"

#define INSN	sizeof(struct bpf_insn)
#define LD_IMM64	(BPF_LD | BPF_IMM | BPF_DW)

/* A function's instructions: @len from @start, in section @section. */
struct func {
	size_t section, start, len;
	const char *name;
};

/* A relocated call or callback reference: at @insn of @section, to symbol @symbol. */
struct ref {
	size_t section, insn, symbol;
};

struct linked_sizes {
	Elf *elf;
	Elf_Data *symbols;
	struct func *funcs;
	struct ref *refs;
	size_t nr_funcs, nr_refs, nr_sections;
	const struct bpf_insn **code;	/* by section: its instructions, or NULL */
	size_t *code_len;
	bool *seen;			/* by function, during one walk */
};

static bool is_call(const struct bpf_insn *insn)
{
	return insn->code == (BPF_JMP | BPF_CALL) && insn->src_reg == BPF_PSEUDO_CALL;
}

/* A 64-bit load: a callback's address (bpf_loop) where relocated against code. */
static bool may_be_callback(const struct bpf_insn *insn)
{
	return insn->code == LD_IMM64;
}

static int ref_order(const void *a, const void *b)
{
	const struct ref *x = a, *y = b;

	if (x->section != y->section)
		return x->section < y->section ? -1 : 1;
	return x->insn < y->insn ? -1 : x->insn > y->insn;
}

/* The executable sections' instructions, and the functions in them. */
static int read_code(struct linked_sizes *ls, size_t strtab)
{
	Elf_Scn *scn = NULL;
	GElf_Sym sym;
	size_t n = ls->symbols->d_size / sizeof(Elf64_Sym);

	while ((scn = elf_nextscn(ls->elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;
		size_t i = elf_ndxscn(scn);

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS ||
		    !(sh.sh_flags & SHF_EXECINSTR) || i >= ls->nr_sections)
			continue;
		data = elf_getdata(scn, NULL);
		if (!data)
			return -1;
		ls->code[i] = data->d_buf;
		ls->code_len[i] = data->d_size / INSN;
	}
	ls->funcs = calloc(n, sizeof(*ls->funcs));
	if (!ls->funcs)
		return -1;
	for (size_t i = 0; i < n && gelf_getsym(ls->symbols, i, &sym); i++) {
		if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx >= ls->nr_sections ||
		    !ls->code[sym.st_shndx])
			continue;
		ls->funcs[ls->nr_funcs++] = (struct func){
			.section = sym.st_shndx, .start = sym.st_value / INSN,
			.len = sym.st_size / INSN, .name = elf_strptr(ls->elf, strtab, sym.st_name),
		};
	}
	return 0;
}

/* The relocations of calls and callback references, sorted. */
static int read_refs(struct linked_sizes *ls)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(ls->elf, scn))) {
		GElf_Shdr sh;
		GElf_Rel rel;
		Elf_Data *data;
		void *grown;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_REL ||
		    sh.sh_info >= ls->nr_sections || !ls->code[sh.sh_info] ||
		    !(data = elf_getdata(scn, NULL)))
			continue;
		grown = realloc(ls->refs, (ls->nr_refs + data->d_size / sizeof(Elf64_Rel)) *
					  sizeof(*ls->refs));
		if (!grown)
			return -1;
		ls->refs = grown;
		for (size_t i = 0; gelf_getrel(data, i, &rel); i++) {
			size_t at = rel.r_offset / INSN;
			const struct bpf_insn *insn = &ls->code[sh.sh_info][at];

			if (at < ls->code_len[sh.sh_info] && (is_call(insn) || may_be_callback(insn)))
				ls->refs[ls->nr_refs++] = (struct ref){
					.section = sh.sh_info, .insn = at,
					.symbol = GELF_R_SYM(rel.r_info),
				};
		}
	}
	qsort(ls->refs, ls->nr_refs, sizeof(*ls->refs), ref_order);
	return 0;
}

static int read_graph(struct linked_sizes *ls)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	if (elf_getshdrnum(ls->elf, &ls->nr_sections))
		return -1;
	ls->code = calloc(ls->nr_sections, sizeof(*ls->code));
	ls->code_len = calloc(ls->nr_sections, sizeof(*ls->code_len));
	if (!ls->code || !ls->code_len)
		return -1;
	while ((scn = elf_nextscn(ls->elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB)
			break;
	if (!scn || !(ls->symbols = elf_getdata(scn, NULL)))
		return -1;
	if (read_code(ls, sh.sh_link) || read_refs(ls))
		return -1;
	ls->seen = calloc(ls->nr_funcs ? ls->nr_funcs : 1, sizeof(*ls->seen));
	return ls->seen ? 0 : -1;
}

struct linked_sizes *linked_sizes_open(const void *elf, size_t size)
{
	struct linked_sizes *ls = calloc(1, sizeof(*ls));

	if (!ls || elf_version(EV_CURRENT) == EV_NONE)
		goto fail;
	ls->elf = elf_memory((char *)elf, size);	/* read, never written */
	if (ls->elf && !read_graph(ls))
		return ls;
fail:
	linked_sizes_close(ls);
	return NULL;
}

/* The function holding instruction @insn of @section: its index, or -1. */
static long func_at(const struct linked_sizes *ls, size_t section, size_t insn)
{
	for (size_t i = 0; i < ls->nr_funcs; i++)
		if (ls->funcs[i].section == section && insn >= ls->funcs[i].start &&
		    insn - ls->funcs[i].start < ls->funcs[i].len)
			return i;
	return -1;
}

/* What the call or callback reference at @at of @section reaches, as libbpf resolves it. */
static long target(const struct linked_sizes *ls, size_t section, size_t at)
{
	const struct bpf_insn *insn = &ls->code[section][at];
	struct ref key = { .section = section, .insn = at }, *ref;
	GElf_Sym sym;

	ref = bsearch(&key, ls->refs, ls->nr_refs, sizeof(*ls->refs), ref_order);
	if (!ref)	/* a call within its section needs no relocation */
		return is_call(insn) ? func_at(ls, section, at + insn->imm + 1) : -1;
	if (!gelf_getsym(ls->symbols, ref->symbol, &sym) || sym.st_shndx >= ls->nr_sections ||
	    !ls->code[sym.st_shndx])
		return -1;
	if (is_call(insn))
		return func_at(ls, sym.st_shndx, sym.st_value / INSN + insn->imm + 1);
	return func_at(ls, sym.st_shndx, (sym.st_value + insn->imm) / INSN);
}

/* The instructions of function @f and of those it reaches not yet seen. */
static size_t walk(struct linked_sizes *ls, long f)
{
	const struct func *fn = &ls->funcs[f];
	size_t total = fn->len;

	ls->seen[f] = true;
	for (size_t i = fn->start; i < fn->start + fn->len && i < ls->code_len[fn->section]; i++) {
		const struct bpf_insn *insn = &ls->code[fn->section][i];
		long callee = is_call(insn) || may_be_callback(insn) ? target(ls, fn->section, i) : -1;

		if (callee >= 0 && !ls->seen[callee])
			total += walk(ls, callee);
		if (insn->code == LD_IMM64)
			i++;
	}
	return total;
}

size_t linked_size(struct linked_sizes *ls, const char *name)
{
	for (size_t i = 0; i < ls->nr_funcs; i++) {
		if (!ls->funcs[i].name || strcmp(ls->funcs[i].name, name))
			continue;
		memset(ls->seen, 0, ls->nr_funcs * sizeof(*ls->seen));
		return walk(ls, i);
	}
	return 0;
}

void linked_sizes_close(struct linked_sizes *ls)
{
	if (!ls)
		return;
	if (ls->elf)
		elf_end(ls->elf);
	free(ls->funcs);
	free(ls->refs);
	free(ls->code);
	free(ls->code_len);
	free(ls->seen);
	free(ls);
}
