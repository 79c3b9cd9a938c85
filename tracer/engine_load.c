// SPDX-License-Identifier: GPL-2.0
/*
 * engine_load: the one loader of trace's and the cache tools' programs,
 * driven by each tool's table (engine_load.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <bpf/btf.h>
#include "errmsg.h"
#include "engine_load.h"
#include "bpf_budget.h"
#include "bpf_cost.h"
#include "core_btf.h"

static const struct engine *printing;

static int engine_libbpf_print(enum libbpf_print_level level, const char *format, va_list args)
{
	va_list copy;

	if (level != LIBBPF_DEBUG) {
		va_copy(copy, args);
		load_failure_note(format, copy);	/* explained by the loader */
		va_end(copy);
	}
	if (!printing || !printing->verbose)
		return 0;
	return vfprintf(stderr, format, args);
}

void engine_print_to(const struct engine *e)
{
	printing = e;
	libbpf_set_print(engine_libbpf_print);
}

static struct bpf_object *object_of(const struct engine *e, void *skel)
{
	return *e->ops->skeleton(skel)->obj;
}

static struct btf *load_kernel_btf(const struct engine *e)
{
	struct btf *vmlinux = e->btf_path ? btf__parse(e->btf_path, NULL) :
					    btf__load_vmlinux_btf();

	if (!vmlinux && e->btf_path)
		errmsg("--btf", "%s: %s", e->btf_path, errmsg_strerror(errno));
	else if (!vmlinux)
		errmsg("kernel BTF (/sys/kernel/btf/vmlinux)", "%s; %s needs a kernel built with "
		       "CONFIG_DEBUG_INFO_BTF=y%s", errmsg_strerror(errno), e->tool,
		       e->btf_option ? ", or a BTF file for it given with --btf" : "");
	return vmlinux;
}

/* Whether @e's programs load in two halves (split_load.h): never when measuring. */
static bool loads_split(const struct engine *e)
{
	return e->may_split && !e->budget_config && split_load_wanted();
}

/*
 * The kernel's BTF into *@vmlinux, and the skeleton opened to relocate
 * against the part of it its CO-RE relocations can look up (core_btf.h).
 * Where the programs load in two halves, the halves' skeletons are opened
 * meanwhile, with the cut's path reserved (split_open()).
 */
static void *open_skeleton(struct engine *e, struct btf **vmlinux,
			   struct bpf_object_open_opts *open_opts, int *err)
{
	size_t size;
	const void *elf = e->elf_bytes(&size);
	const char *cut, *early = loads_split(e) ? core_btf_reserve() : NULL;
	void *skel;

	if (early) {
		open_opts->btf_custom_path = early;
		split_open(&e->programs, open_opts);
	}
	*vmlinux = load_kernel_btf(e);
	cost_phase("kernel BTF");
	if (!*vmlinux) {
		*err = -ENOENT;
		return NULL;
	}
	cut = core_btf_path(*vmlinux, elf, size);
	cost_phase("CO-RE BTF");
	if (early && !cut) {
		*err = -ENOENT;
		errmsg("CO-RE BTF", "writing its memory file: %s", errmsg_strerror(errno));
		return NULL;
	}
	if (!early)
		open_opts->btf_custom_path = cut ? cut : e->btf_path;
	if (e->explain)
		core_btf_print(stderr, e->tool);
	skel = e->ops->open(open_opts);
	cost_phase("open");
	if (!skel) {
		*err = -errno;
		errmsg("opening BPF object", "%s", errmsg_strerror(errno));
	}
	return skel;
}

/* How each point attaches here, which load, and what the kernel lacks: 0, or -ENOENT said. */
static int choose(struct engine *e, void *skel, const struct btf *vmlinux, bool use_btf,
		  const void *arg, struct attach_choice *c, bool *loaded)
{
	struct engine_point p[ENGINE_MAX_POINTS] = {};
	int missing = 0;

	e->describe(skel, c);
	attach_choice_resolve(c, e->nr_points, vmlinux);
	for (int i = 0; i < e->nr_points; i++)
		attach_choice_find(&c[i], vmlinux, use_btf);
	attach_choice_functions(c, e->nr_points);
	cost_phase("attach choice");
	e->select(skel, c, p, arg);
	for (int i = 0; i < e->nr_points; i++) {
		if (!c[i].how && p[i].needed_by) {
			errmsg(NULL, "kernel lacks tracepoint %s:%s%s, which %s needs", c[i].group,
			       c[i].tracepoint, c[i].function ?
			       ", nor its function in BTF for fentry" : "", p[i].needed_by);
			missing++;
		}
		loaded[i] = c[i].how && p[i].load;
	}
	attach_choice_set_autoload(c, e->nr_points, loaded);
	if (missing || e->configure(skel, vmlinux, arg))
		return -ENOENT;
	return 0;
}

/*
 * Load the chosen programs of @skel, opened with @open_opts: at once, or
 * in two halves at once where the tool allows it (never when measuring).
 * @times: each program's verification time, said. 0 or the error.
 */
static int load_chosen(struct engine *e, void *skel, const struct bpf_object_open_opts *open_opts,
		       bool times)
{
	struct bpf_object *objs[2];
	bool split = loads_split(e);
	int err;

	if (e->budget_config && budget_prepare(object_of(e, skel)))
		return -ENOENT;
	e->programs.main = skel;
	if (times)
		budget_forget();
	if (split && e->explain)
		fprintf(stderr, "%s: load: the programs verified in two halves at once\n", e->tool);
	err = split_load(&e->programs, open_opts, split, times);
	cost_phase("load");
	if (times && !err)
		budget_print_times(stderr, objs, split_objects(&e->programs, objs), e->tool);
	if (split && e->explain && !err)
		split_print(&e->programs, stderr, e->tool);
	return err;
}

/* The loaded rows of @c whose program the loader attaches itself, kept in @e. */
static void keep_loader_rows(struct engine *e, const struct attach_choice *c, const bool *loaded)
{
	e->nr_by_loader = 0;
	for (int i = 0; i < e->nr_points; i++) {
		if (!loaded[i] || !attach_choice_by_loader(&c[i]))
			continue;
		e->by_loader[e->nr_by_loader].program = bpf_program__name(c[i].chosen);
		e->by_loader[e->nr_by_loader].tracepoint = c[i].tracepoint;
		e->by_loader[e->nr_by_loader++].link = NULL;
	}
}

/* open -> choose -> set up -> load, with either the tp_btf or the raw_tp programs. */
static void *open_and_load(struct engine *e, const void *arg, bool use_btf, bool times, int *err)
{
	LIBBPF_OPTS(bpf_object_open_opts, open_opts);
	struct attach_choice c[ENGINE_MAX_POINTS];
	bool loaded[ENGINE_MAX_POINTS];
	struct btf *vmlinux = NULL;
	void *skel = open_skeleton(e, &vmlinux, &open_opts, err);

	if (!skel)
		goto fail;
	if ((*err = choose(e, skel, vmlinux, use_btf, arg, c, loaded)))
		goto fail;
	cost_phase("probes");
	*err = load_chosen(e, skel, &open_opts, times && !e->budget_config);
	if (e->budget_config)
		e->budget_over += budget_report(stdout, object_of(e, skel), !*err, e->budget_tool,
						e->budget_config, use_btf ? "tp_btf" : "raw_tp");
	if (*err)
		goto fail;
	keep_loader_rows(e, c, loaded);
	if (e->verbose)
		attach_choice_print(stderr, e->tool, c, e->nr_points, loaded);
	btf__free(vmlinux);
	core_btf_close();
	return skel;
fail:
	e->programs.main = skel;
	split_destroy(&e->programs);
	btf__free(vmlinux);
	core_btf_close();
	return NULL;
}

/*
 * With the verification times, a load asks for the verifier's statistics; a
 * refusal is loaded again without them, so that libbpf prints the
 * verifier's log, with its reason (a log given to libbpf is not printed).
 */
static void *load_flavour(struct engine *e, const void *arg, bool use_btf, int *err)
{
	void *skel = open_and_load(e, arg, use_btf, e->explain, err);

	if (!skel && *err != -ENOENT && e->explain)
		skel = open_and_load(e, arg, use_btf, false, err);
	return skel;
}

static void explain_load_error(int err)
{
	/* As root, EACCES is the verifier's refusal, not a missing privilege. */
	if (err == -EPERM || (err == -EACCES && geteuid() != 0))
		errmsg("loading BPF programs", "%s: run as root, or with CAP_BPF and CAP_PERFMON "
		       "(uid %d)", errmsg_strerror(-err), (int)getuid());
	else if (load_failure_describe())
		errmsg("loading BPF programs", "the kernel refused %s (rerun with -v for the "
		       "verifier's log)", load_failure_describe());
	else
		errmsg("loading BPF programs", "%s (rerun with -v for the verifier's log)",
		       errmsg_strerror(-err));
}

void *engine_load(struct engine *e, const void *arg, enum engine_flavour flavour)
{
	void *skel = NULL;
	int err = 0;

	engine_print_to(e);
	if (flavour != ENGINE_RAW_TP) {
		skel = load_flavour(e, arg, true, &err);
		e->flavour = "tp_btf";
		if (skel || err == -ENOENT || flavour == ENGINE_TP_BTF)
			goto out;
		if (e->explain)
			fprintf(stderr, "%s: tp_btf programs refused (%s); trying raw_tp\n", e->tool,
				strerror(-err));
	}
	skel = load_flavour(e, arg, false, &err);
	e->flavour = "raw_tp";
out:
	if (!skel && err != -ENOENT)
		explain_load_error(err);
	return skel;
}

/* The loaded program named @name, in whichever object loaded it; or NULL. */
static struct bpf_program *loaded_program(struct engine *e, const char *name)
{
	struct bpf_object *objs[2];
	int n = split_objects(&e->programs, objs);

	for (int i = 0; i < n; i++) {
		struct bpf_program *prog = bpf_object__find_program_by_name(objs[i], name);

		if (prog && bpf_program__fd(prog) >= 0)
			return prog;
	}
	return NULL;
}

int engine_attach(struct engine *e)
{
	int err = split_attach(&e->programs);

	for (int i = 0; i < e->nr_by_loader && !err; i++) {
		struct bpf_program *prog = loaded_program(e, e->by_loader[i].program);
		struct bpf_link *link = prog ? bpf_program__attach_raw_tracepoint(
			prog, e->by_loader[i].tracepoint) : NULL;

		if (!link)
			err = prog ? -errno : -ENOENT;
		e->by_loader[i].link = link;
	}
	return err;
}

void engine_cost(struct engine *e, struct bpf_cost *cost)
{
	struct bpf_object *objs[2];

	cost_read(objs, split_objects(&e->programs, objs), cost);
}

void engine_unload(struct engine *e)
{
	for (int i = 0; i < e->nr_by_loader; i++)
		bpf_link__destroy(e->by_loader[i].link);
	e->nr_by_loader = 0;
	split_destroy(&e->programs);
}

/* One configuration with one flavour: 0, or 1 when the kernel refused it (said). */
static int budget_one(struct engine *e, const struct engine_config *config, bool use_btf,
		      bool has_bpf_loop)
{
	const char *flavour = use_btf ? "tp_btf" : "raw_tp";
	int err = 0;

	if (config->unrolled && has_bpf_loop) {
		printf("# %s %s %s: not measured: this kernel has bpf_loop, and the loader picks "
		       "the unrolled walk only without it\n", config->tool, config->name, flavour);
		return 0;
	}
	e->budget_tool = config->tool;
	e->budget_config = config->name;
	if (open_and_load(e, config->arg, use_btf, false, &err))
		engine_unload(e);
	else if (err == -ENOENT)
		printf("# %s %s %s: not loadable on this kernel (said above)\n", config->tool,
		       config->name, flavour);
	else
		return explain_load_error(err), 1;
	return 0;
}

int engine_budget(struct engine *e, const struct engine_config *configs, int n)
{
	bool has_bpf_loop = kernel_has_bpf_loop();
	int refused = 0;

	engine_print_to(e);
	e->budget_over = 0;
	budget_header(stdout);
	for (int btf = 1; btf >= 0; btf--)
		for (int i = 0; i < n; i++)
			refused += budget_one(e, &configs[i], btf, has_bpf_loop);
	e->budget_config = e->budget_tool = NULL;
	return budget_verdict(e->tool, e->budget_over, refused);
}
