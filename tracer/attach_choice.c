// SPDX-License-Identifier: GPL-2.0
/*
 * attach_choice: which program each attach point loads on the running
 * kernel (attach_choice.h), shared by trace and the cache tools.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <bpf/btf.h>
#include "attach_choice.h"
#include "errmsg.h"

/* Entries of a thread-id hash that stands in for task storage. */
#define THREAD_HASH_ENTRIES	65536

/* The prototype of tracepoint @name (its btf_trace_<name> typedef), or NULL. */
static const struct btf_type *tracepoint_proto(const struct btf *vmlinux, const char *name)
{
	char type_name[128];
	const struct btf_type *t;
	int id;

	snprintf(type_name, sizeof(type_name), "btf_trace_%s", name);
	id = btf__find_by_name_kind(vmlinux, type_name, BTF_KIND_TYPEDEF);
	if (id < 0)
		return NULL;
	t = btf__type_by_id(vmlinux, btf__resolve_type(vmlinux, id));
	if (!t || !btf_is_ptr(t))
		return NULL;
	t = btf__type_by_id(vmlinux, t->type);
	return t && btf_is_func_proto(t) ? t : NULL;
}

/* The prototype of the kernel function of BTF id @id (< 0: none), or NULL. */
static const struct btf_type *proto_of_function(const struct btf *vmlinux, int id)
{
	const struct btf_type *t = id < 0 ? NULL : btf__type_by_id(vmlinux, id);

	t = t ? btf__type_by_id(vmlinux, t->type) : NULL;
	return t && btf_is_func_proto(t) ? t : NULL;
}

/* The prototype of kernel function @name, or NULL. */
static const struct btf_type *function_proto(const struct btf *vmlinux, const char *name)
{
	return proto_of_function(vmlinux, btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC));
}

void attach_choice_resolve(struct attach_choice *c, int n, const struct btf *vmlinux)
{
	int types = btf__type_cnt(vmlinux);

	for (int i = 0; i < n; i++)
		c[i].function_id = -1;
	for (int id = 1; id < types; id++) {
		const struct btf_type *t = btf__type_by_id(vmlinux, id);
		const char *name;

		if (!btf_is_func(t))
			continue;
		name = btf__name_by_offset(vmlinux, t->name_off);
		for (int i = 0; i < n; i++)
			if (c[i].function && c[i].function_id < 0 && strcmp(name, c[i].function) == 0)
				c[i].function_id = id;
	}
}

void attach_choice_find(struct attach_choice *c, const struct btf *vmlinux, bool use_btf)
{
	/* A row of a function alone (ATTACH_FUNCTION) has no tracepoint to look up. */
	const struct btf_type *proto = c->btf_prog || c->raw_prog ?
				       tracepoint_proto(vmlinux, c->tracepoint) : NULL;

	c->how = NULL;
	c->chosen = c->chosen_return = NULL;
	if (proto) {
		bool older = c->older_params && btf_vlen(proto) == c->older_params;

		bool btf;

		if (older && !c->older_btf_prog)
			return;
		btf = use_btf && (older || c->btf_prog);
		c->chosen = btf ? (older ? c->older_btf_prog : c->btf_prog) :
				  (older ? c->older_raw_prog : c->raw_prog);
		c->how = btf ? (older ? "tp_btf(older form)" : "tp_btf") :
			       (older ? "raw_tp(older form)" : "raw_tp");
		return;
	}
	proto = c->function_prog ? proto_of_function(vmlinux, c->function_id) : NULL;
	if (proto && (!c->function_params || btf_vlen(proto) == c->function_params)) {
		c->chosen = c->function_prog;
		c->how = bpf_program__section_name(c->function_prog);
	}
}

/*
 * Can fentry attach on this kernel? Asked once, of the function of BTF id
 * @id, with a program that only returns, loaded and attached, then closed:
 * BPF trampolines need ftrace direct calls, which are the architecture's,
 * not a function's (arm64 before v6.4 lacks them: ENOTSUPP at attach,
 * attach_failure_say()), and each probe makes and frees a trampoline
 * (1.8 s for two in a TCG guest of 6.1).
 */
static bool fentry_attaches(int id)
{
	const struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_TRACE_FENTRY,
		    .attach_btf_id = id);
	static int answer = -1;
	int prog, link = -1;

	if (id < 0)
		return false;
	if (answer >= 0)
		return answer;
	prog = bpf_prog_load(BPF_PROG_TYPE_TRACING, "fentry_probe", "GPL", insns, 2, &opts);
	if (prog >= 0)
		link = bpf_raw_tracepoint_open(NULL, prog);
	if (link >= 0)
		close(link);
	if (prog >= 0)
		close(prog);
	answer = link >= 0;
	return answer;
}

/* Has the kernel kprobes, as perf events (the way libbpf attaches them first)? */
static bool kernel_has_kprobes(void)
{
	return access("/sys/bus/event_source/devices/kprobe/type", R_OK) == 0;
}

/* Does @c attach by its function, with a kprobe flavour to be had? */
static bool uses_function(const struct attach_choice *c)
{
	return c->chosen && c->chosen == c->function_prog && c->kprobe_prog;
}

/* Should the function fallbacks among @c's @n rows be kprobes? */
static bool functions_by_kprobe(const struct attach_choice *c, int n)
{
	const char *knob = getenv("PAGETRACE_ATTACH");

	if (knob && strcmp(knob, "kprobe") == 0)
		return true;
	if (!kernel_has_kprobes())
		return false;	/* fentry, or the refusal of attach_failure_say() */
	for (int i = 0; i < n; i++)
		if (uses_function(&c[i]) && !fentry_attaches(c[i].function_id))
			return true;
	return false;
}

/* Is @p a fentry or fexit program (a BPF trampoline's)? */
static bool on_trampoline(const struct bpf_program *p)
{
	enum bpf_attach_type type = bpf_program__expected_attach_type(p);

	return type == BPF_TRACE_FENTRY || type == BPF_TRACE_FEXIT;
}

/*
 * Rows that only fentry can attach, on a kernel where it cannot:
 * unavailable. A row whose function program is itself a kprobe (arm64's
 * fault start, ATTACH_FAULT) is not one of them.
 */
static void drop_unattachable_functions(struct attach_choice *c, int n)
{
	for (int i = 0; i < n; i++)
		if (c[i].chosen && c[i].chosen == c[i].function_prog && !c[i].kprobe_prog &&
		    on_trampoline(c[i].chosen) && !fentry_attaches(c[i].function_id))
			c[i].chosen = NULL, c[i].how = NULL;
}

void attach_choice_functions(struct attach_choice *c, int n)
{
	bool any = false;

	drop_unattachable_functions(c, n);
	for (int i = 0; i < n; i++)
		any = any || uses_function(&c[i]);
	if (!any || !functions_by_kprobe(c, n))
		return;
	for (int i = 0; i < n; i++) {
		if (!uses_function(&c[i]))
			continue;
		c[i].chosen = c[i].kprobe_prog;
		c[i].chosen_return = c[i].kretprobe_prog;
		c[i].how = c[i].kretprobe_prog ? "kprobe+kretprobe" : "kprobe";
	}
}

void attach_choice_set_autoload(const struct attach_choice *c, int n, const bool *loaded)
{
	/* Every program of every row off, then the chosen ones on: a program
	 * two rows share loads when either row does. */
	for (int i = 0; i < n; i++) {
		struct bpf_program *progs[] = { c[i].btf_prog, c[i].raw_prog, c[i].older_btf_prog,
						c[i].older_raw_prog, c[i].function_prog,
						c[i].kprobe_prog, c[i].kretprobe_prog };

		for (size_t j = 0; j < sizeof(progs) / sizeof(progs[0]); j++)
			if (progs[j])
				bpf_program__set_autoload(progs[j], false);
	}
	for (int i = 0; i < n; i++) {
		if (loaded[i] && c[i].chosen)
			bpf_program__set_autoload(c[i].chosen, true);
		if (loaded[i] && c[i].chosen_return)
			bpf_program__set_autoload(c[i].chosen_return, true);
	}
}

bool attach_choice_faults_from_ptes(const struct attach_choice *hooks, bool *load)
{
	const char *knob = getenv("PAGETRACE_FAULTS");
	bool ptes = !(knob && strcmp(knob, "events") == 0) &&
		    (hooks[0].how || hooks[1].how) && hooks[2].how && hooks[3].how;

	load[0] = ptes && hooks[0].how;
	load[1] = ptes && !hooks[0].how;	/* do_set_pte: before set_pte_range */
	load[2] = ptes;
	load[3] = ptes;
	return ptes;
}

bool attach_choice_by_loader(const struct attach_choice *c)
{
	return c->chosen && strcmp(bpf_program__section_name(c->chosen), "raw_tp") == 0;
}

void attach_choice_print(FILE *f, const char *tool, const struct attach_choice *c, int n,
			 const bool *loaded)
{
	fprintf(f, "%s: attached:", tool);
	for (int i = 0; i < n; i++)
		if ((!loaded || loaded[i]) && c[i].how)
			fprintf(f, " %s=%s", c[i].tracepoint, c[i].how);
	fputc('\n', f);
}

bool kernel_param_is_pointer(const struct btf *vmlinux, const char *function, int index)
{
	const struct btf_type *proto = function_proto(vmlinux, function);
	const struct btf_type *t;

	if (!proto || index >= btf_vlen(proto))
		return false;
	t = btf__type_by_id(vmlinux, btf__resolve_type(vmlinux, btf_params(proto)[index].type));
	return t && btf_is_ptr(t);
}

bool thread_storage_fallback(struct bpf_object *obj)
{
	struct bpf_map *map;

	if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) == 1)
		return true;
	bpf_object__for_each_map(map, obj) {
		if (bpf_map__type(map) != BPF_MAP_TYPE_TASK_STORAGE)
			continue;
		bpf_map__set_type(map, BPF_MAP_TYPE_HASH);
		bpf_map__set_max_entries(map, THREAD_HASH_ENTRIES);
	}
	return false;
}

bool kernel_has_bpf_loop(void)
{
	/* libbpf cannot probe helpers for tracing programs; the helper set is the same. */
	return libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_loop, NULL) == 1;
}

static struct {
	char program[64];
	char reason[256];
	char description[352];
	bool in_log;		/* between BEGIN and END PROG LOAD LOG */
	bool reason_is_core;	/* a CO-RE relocation: the best reason there is */
} refusal;

/* Is @line of a verifier log a summary rather than a reason? */
static bool log_line_is_summary(const char *line)
{
	return !*line || strncmp(line, "processed ", 10) == 0 ||
	       strncmp(line, "verification time", 17) == 0 ||
	       strncmp(line, "stack depth", 11) == 0 || strstr(line, "PROG LOAD LOG");
}

static void note_line(char *line)
{
	char *p;

	if ((p = strstr(line, "prog '")) && strstr(p, "': BPF program load failed")) {
		sscanf(p, "prog '%63[^']'", refusal.program);
		refusal.reason[0] = '\0';
		refusal.reason_is_core = false;
		return;
	}
	if (strstr(line, "-- BEGIN PROG LOAD LOG --"))
		refusal.in_log = true;
	else if (strstr(line, "-- END PROG LOAD LOG --"))
		refusal.in_log = false;
	if (!refusal.in_log || refusal.reason_is_core || log_line_is_summary(line))
		return;
	refusal.reason_is_core = strstr(line, "failed to resolve CO-RE relocation") != NULL;
	snprintf(refusal.reason, sizeof(refusal.reason), "%s", line);
}

void load_failure_note(const char *format, va_list args)
{
	char *text = NULL, *line, *save = NULL;

	/* A verifier log can be megabytes, in one message: no fixed buffer. */
	if (vasprintf(&text, format, args) < 0)
		return;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		note_line(line);
	free(text);
}

const char *load_failure_describe(void)
{
	if (!refusal.program[0])
		return NULL;
	snprintf(refusal.description, sizeof(refusal.description), "program %s: %s",
		 refusal.program, refusal.reason[0] ? refusal.reason : "refused");
	return refusal.description;
}

void say_ready(const char *tool)
{
	fprintf(stderr, "%s: Tracing... Hit Ctrl-C to end.\n", tool);
	fflush(stderr);
}

/*
 * ENOTSUPP (524, the kernel's own errno) at attach: the kernel cannot
 * attach fentry or fexit to a kernel function, which needs ftrace direct
 * calls (arm64 has them from v6.4, "arm64: ftrace: Add direct call
 * support", Florent Revest; Debian's arm64 6.1 refuses). Only the filemap
 * fallbacks (programs.bpf.h) attach that way.
 */
#define KERNEL_ENOTSUPP 524

void attach_failure_say(int err, const char *needs)
{
	if (err == -KERNEL_ENOTSUPP)
		errmsg(NULL, "kernel lacks fentry/fexit on kernel functions (BPF trampolines), "
		       "which %s needs", needs);
	else
		errmsg("attaching to tracepoints", "%s", errmsg_strerror(-err));
}
