// SPDX-License-Identifier: GPL-2.0
/*
 * bpf_budget: the verifier's instructions and stack for each loaded program
 * (bpf_budget.h). The logs hold only the verifier's statistics (log level 4),
 * a few lines a program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "errmsg.h"
#include "bpf_budget.h"

#define BUDGET_LOG_LEVEL	4	/* BPF_LOG_STATS: statistics only */
#define BUDGET_LOG_BYTES	65536	/* a log longer than its buffer fails the load (ENOSPC) */
#define BUDGET_PROGRAMS		64
#define BUDGET_SUBPROGS		64

static struct {
	const struct bpf_program *prog;
	char log[BUDGET_LOG_BYTES];
} logs[BUDGET_PROGRAMS];

/* The largest figures of every row so far, for the verdict. */
static struct {
	unsigned long insns, stack;
	char insns_row[160], stack_row[160];
	int rows;
} largest;

int budget_prepare(struct bpf_object *obj)
{
	memset(logs, 0, sizeof(logs));
	return budget_prepare_more(obj);
}

void budget_forget(void)
{
	memset(logs, 0, sizeof(logs));
}

int budget_prepare_more(struct bpf_object *obj)
{
	struct bpf_program *prog;
	int n = 0;

	while (n < BUDGET_PROGRAMS && logs[n].prog)
		n++;
	bpf_object__for_each_program(prog, obj) {
		if (!bpf_program__autoload(prog))
			continue;
		if (n == BUDGET_PROGRAMS)
			return errmsg("--budget", "more than %d programs", BUDGET_PROGRAMS), -1;
		logs[n].prog = prog;
		bpf_program__set_log_level(prog, BUDGET_LOG_LEVEL);
		bpf_program__set_log_buf(prog, logs[n].log, sizeof(logs[n].log));
		n++;
	}
	return 0;
}

static const char *log_of(const struct bpf_program *prog)
{
	for (int i = 0; i < BUDGET_PROGRAMS && logs[i].prog; i++)
		if (logs[i].prog == prog)
			return logs[i].log;
	return "";
}

/* The line of @log that starts with @start, or NULL. */
static const char *log_line(const char *log, const char *start)
{
	for (const char *line = log; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
		if (!strncmp(line, start, strlen(start)))
			return line;
	return NULL;
}

/* The verifier's instruction count: from the kernel, else from its log. */
static unsigned long verified_insns(const struct bpf_program *prog, const char *log,
				    const char **source)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	const char *p = log_line(log, "processed ");
	unsigned long n = 0;

	*source = "info";
	if (bpf_program__fd(prog) >= 0 && !bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) && info.verified_insns)
		return info.verified_insns;
	*source = "log";
	if (!p || sscanf(p, "processed %lu insns", &n) != 1)
		*source = "none";
	return n;
}

/* A bpf-to-bpf call. */
static bool is_subprog_call(const struct bpf_insn *insn)
{
	return insn->code == (BPF_JMP | BPF_CALL) && insn->src_reg == BPF_PSEUDO_CALL;
}

/* A callback's address (bpf_loop's), loaded by an ld_imm64. */
static bool is_callback_address(const struct bpf_insn *insn)
{
	return insn->code == (BPF_LD | BPF_IMM | BPF_DW) && insn->src_reg == BPF_PSEUDO_FUNC;
}

/*
 * The subprograms of @prog's instructions as the verifier finds them: the
 * entry, and each target of a bpf-to-bpf call or of a callback's address
 * (bpf_loop's), in order. @calls[i] is the subprogram instruction i calls
 * (or takes the address of), -1 for none. In the kernel's translation
 * (@xlated) a call's offset is in .off, as bpftool reads it; before, in .imm.
 * Returns how many, -1 if too many.
 */
static int find_subprogs(const struct bpf_insn *insn, int n, bool xlated, int *start, int *calls)
{
	int count = 1;

	start[0] = 0;
	for (int i = 0; i < n; i++) {
		bool call = is_subprog_call(&insn[i]), func = is_callback_address(&insn[i]);
		int target = i + (call && xlated ? insn[i].off : insn[i].imm) + 1, j;

		calls[i] = -1;
		if (!call && !func)
			continue;
		for (j = 0; j < count && start[j] != target; j++)
			;
		if (j == count && count == BUDGET_SUBPROGS)
			return -1;
		if (j == count)
			start[count++] = target;
		calls[i] = target;
	}
	for (int i = 1; i < count; i++)		/* insertion sort: a few entries */
		for (int j = i; j > 0 && start[j] < start[j - 1]; j--) {
			int t = start[j];

			start[j] = start[j - 1];
			start[j - 1] = t;
		}
	return count;
}

static int subprog_of(const int *start, int count, int insn)
{
	int i = count - 1;

	while (i > 0 && start[i] > insn)
		i--;
	return i;
}

/*
 * The verifier's own rule (check_max_stack_depth): along each chain of calls
 * from @sub, each frame rounded up to 32 bytes (at least 32), summed. The
 * verifier refuses no recursion, so @level bounds the walk.
 */
static unsigned long deepest_chain(const int *start, int count, const int *calls, int n,
				   const unsigned long *frame, int sub, int level)
{
	int end = sub + 1 < count ? start[sub + 1] : n;
	unsigned long own = ((frame[sub] ? frame[sub] : 1) + 31) / 32 * 32, deepest = 0;

	for (int i = start[sub]; level < BUDGET_SUBPROGS && i < end; i++) {
		unsigned long d;

		if (calls[i] < 0)
			continue;
		d = deepest_chain(start, count, calls, n, frame,
				  subprog_of(start, count, calls[i]), level + 1);
		deepest = d > deepest ? d : deepest;
	}
	return own + deepest;
}

/*
 * The deepest chain into *@deepest, from @insn's calls, when its subprograms
 * are the @nframes of the log. Returns how many subprograms @insn has.
 */
static int chain_of(const struct bpf_insn *insn, int n, bool xlated, const unsigned long *frame,
		    int nframes, unsigned long *deepest)
{
	int start[BUDGET_SUBPROGS], *calls = insn && n > 0 ? calloc(n, sizeof(*calls)) : NULL;
	int count = calls ? find_subprogs(insn, n, xlated, start, calls) : -1;

	if (count == nframes)
		*deepest = deepest_chain(start, count, calls, n, frame, 0, 0);
	free(calls);
	return count;
}

/*
 * The kernel's own subprograms of program @fd: where each starts in its
 * translation (@start, from func_info) and where its JIT put it (@ksyms,
 * zero without a JIT). Returns how many, -1 where the kernel does not say.
 */
static int kernel_subprogs(int fd, int *start, __u64 *ksyms)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info), n, rec, nksyms;
	char *recs;
	int count = -1;

	if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len))
		return -1;
	n = info.nr_func_info;
	rec = info.func_info_rec_size;
	nksyms = info.nr_jited_ksyms;
	if (!n || n > BUDGET_SUBPROGS || rec < sizeof(struct bpf_func_info) ||
	    nksyms > BUDGET_SUBPROGS || !(recs = calloc(n, rec)))
		return -1;
	memset(&info, 0, sizeof(info));
	memset(ksyms, 0, BUDGET_SUBPROGS * sizeof(*ksyms));
	info.nr_func_info = n;
	info.func_info_rec_size = rec;
	info.func_info = (__u64)(unsigned long)recs;
	info.nr_jited_ksyms = nksyms;
	info.jited_ksyms = (__u64)(unsigned long)ksyms;
	len = sizeof(info);
	if (!bpf_obj_get_info_by_fd(fd, &info, &len)) {
		for (__u32 i = 0; i < n; i++)
			start[i] = ((struct bpf_func_info *)(recs + i * rec))->insn_off;
		count = n;
	}
	free(recs);
	return count;
}

/*
 * @calls[i] for the kernel's translation @insn of @n instructions, whose
 * @count subprograms start at @start: a bpf-to-bpf call's target from its
 * .off (the JIT keeps the subprogram's index in .imm); a callback's address
 * (an ld_imm64 the JIT filled with where it put the callback) from
 * @ksyms. Returns 0, or -1 for an address or target that is no subprogram's.
 */
static int kernel_calls(const struct bpf_insn *insn, int n, const int *start, int count,
			const __u64 *ksyms, int *calls)
{
	for (int i = 0; i < n; i++) {
		bool call = is_subprog_call(&insn[i]);
		bool func = is_callback_address(&insn[i]) && i + 1 < n;
		int target = -1;

		calls[i] = -1;
		if (call)
			target = i + insn[i].off + 1;
		if (func) {
			__u64 addr = (__u32)insn[i].imm | (__u64)(__u32)insn[i + 1].imm << 32;

			for (int k = 0; k < count; k++)
				if (ksyms[k] && ksyms[k] == addr)
					target = start[k];
			if (target < 0)		/* no JIT: the offset, as loaded */
				target = i + insn[i].imm + 1;
		}
		if (!call && !func)
			continue;
		for (int k = 0; k < count; k++)
			if (start[k] == target)
				calls[i] = target;
		if (calls[i] < 0)
			return -1;
	}
	return 0;
}

/*
 * The deepest chain into *@deepest from the kernel's own view of program
 * @fd, translated as @insn, when it has the @nframes subprograms of the log.
 * Returns how many it has, -1 where it does not say.
 */
static int kernel_chain(int fd, const struct bpf_insn *insn, int n, const unsigned long *frame,
			int nframes, unsigned long *deepest)
{
	int start[BUDGET_SUBPROGS], *calls, count;
	__u64 ksyms[BUDGET_SUBPROGS];

	if (!insn || n <= 0 || (count = kernel_subprogs(fd, start, ksyms)) < 0)
		return -1;
	calls = calloc(n, sizeof(*calls));
	if (!calls || kernel_calls(insn, n, start, count, ksyms, calls))
		count = -1;
	if (count == nframes)
		*deepest = deepest_chain(start, count, calls, n, frame, 0, 0);
	free(calls);
	return count;
}

/* The instructions as the kernel kept them (its dead code removed), or NULL. */
static struct bpf_insn *xlated_insns(int fd, int *n)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	struct bpf_insn *insn;

	if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) || !info.xlated_prog_len)
		return NULL;
	*n = info.xlated_prog_len / sizeof(*insn);
	insn = calloc(*n, sizeof(*insn));
	memset(&info, 0, sizeof(info));
	info.xlated_prog_len = *n * sizeof(*insn);
	info.xlated_prog_insns = (__u64)(unsigned long)insn;
	len = sizeof(info);
	if (insn && !bpf_obj_get_info_by_fd(fd, &info, &len))
		return insn;
	free(insn);
	return NULL;
}

/*
 * The log's "stack depth A+B+..." (one frame a subprogram, in order): the
 * frames as written, and the deepest chain of calls: from the kernel's
 * translation and its own list of subprograms (func_info, and the JIT's
 * addresses for callbacks), else from the translation's calls alone, else
 * from the instructions libbpf loaded (all subprograms, dead or not: a
 * superset of the calls); the sum of every frame where none has the log's
 * subprograms (marked "(sum)").
 */
static unsigned long stack_depth(const struct bpf_program *prog, const char *log, char *frames,
				 size_t size)
{
	int n = 0, count, nframes = 0;
	const char *p = log_line(log, "stack depth ");
	unsigned long frame[BUDGET_SUBPROGS], sum = 0;
	struct bpf_insn *insn;
	char *end;

	snprintf(frames, size, "?no-stack-depth-line");
	if (!p)
		return 0;
	p += strlen("stack depth ");
	/* 7.3's form, "stack depth max N": the verifier's own deepest figure, taken as it is. */
	if (sscanf(p, "max %lu", &sum) == 1 && p[4 + strspn(p + 4, "0123456789")] == '\n') {
		snprintf(frames, size, "max_%lu", sum);
		return sum;
	}
	snprintf(frames, size, "%.*s", (int)strcspn(p, "\n"), p);
	for (const char *q = frames; *q && nframes < BUDGET_SUBPROGS; q = *end == '+' ? end + 1 : end) {
		frame[nframes] = strtoul(q, &end, 10);
		if (end == q || (*end && *end != '+'))
			break;
		sum += frame[nframes++];
	}
	if (!nframes || frames[strspn(frames, "0123456789+")]) {
		/* A form of the line this tool does not know: said, never taken for 0. */
		memmove(frames + 1, frames, strnlen(frames, size - 2) + 1);
		frames[0] = '?';
		frames[size - 1] = '\0';
		for (char *c = frames; *c; c++)
			*c = *c == ' ' ? '_' : *c;
		return 0;
	}
	insn = xlated_insns(bpf_program__fd(prog), &n);
	count = kernel_chain(bpf_program__fd(prog), insn, n, frame, nframes, &sum);
	if (count != nframes)
		count = chain_of(insn, n, true, frame, nframes, &sum);
	if (count != nframes)
		count = chain_of(bpf_program__insns(prog), bpf_program__insn_cnt(prog), false, frame,
				 nframes, &sum);
	if (count != nframes)
		snprintf(frames + strlen(frames), size - strlen(frames), "(sum)");
	free(insn);
	return sum;
}

static void note_largest(const char *row, unsigned long insns, unsigned long stack)
{
	largest.rows++;
	if (insns >= largest.insns) {
		largest.insns = insns;
		snprintf(largest.insns_row, sizeof(largest.insns_row), "%s", row);
	}
	if (stack >= largest.stack) {
		largest.stack = stack;
		snprintf(largest.stack_row, sizeof(largest.stack_row), "%s", row);
	}
}

int budget_report(FILE *f, struct bpf_object *obj, bool loaded, const char *tool,
		  const char *config, const char *flavour)
{
	struct bpf_program *prog;
	int over = 0;

	bpf_object__for_each_program(prog, obj) {
		const char *log = log_of(prog), *source;
		char frames[64], row[160];
		unsigned long insns, stack;

		bool refused = !loaded && log_line(log, "processed ");

		if (!refused && (!loaded || !bpf_program__autoload(prog) || bpf_program__fd(prog) < 0))
			continue;
		insns = verified_insns(prog, log, &source);
		stack = stack_depth(prog, log, frames, sizeof(frames));
		snprintf(row, sizeof(row), "%s %s (%s, %s)%s", tool, bpf_program__name(prog), flavour,
			 config, refused ? " refused" : "");
		fprintf(f, "%-10s %-12s %-7s %-30s %7lu %-4s %4lu %s\n", tool, config, flavour,
			bpf_program__name(prog), insns, source, stack, frames);
		note_largest(row, insns, stack);
		if (frames[0] == '?')
			errmsg("budget", "%s: the verifier's log says no stack depth this tool reads: "
			       "'stack depth %s'", row, frames + 1);
		if (refused || insns > BUDGET_MAX_INSNS || stack > BUDGET_MAX_STACK ||
		    !strcmp(source, "none") || frames[0] == '?') {
			errmsg("budget", "%s: %lu instructions (ceiling %d), stack %lu bytes (ceiling %d)",
			       row, insns, BUDGET_MAX_INSNS, stack, BUDGET_MAX_STACK);
			over++;
		}
	}
	memset(logs, 0, sizeof(logs));
	return over;
}

/* " NAME T s (N insns)," of a loaded @prog; its time added to *@total. */
static void print_time(FILE *f, const struct bpf_program *prog, unsigned long *total)
{
	const char *line = log_line(log_of(prog), "verification time "), *source;
	unsigned long usec = 0;

	if (!bpf_program__autoload(prog) || bpf_program__fd(prog) < 0)
		return;
	if (line)
		sscanf(line, "verification time %lu usec", &usec);
	*total += usec;
	fprintf(f, " %s %.3f s (%lu insns),", bpf_program__name(prog), usec / 1e6,
		verified_insns(prog, log_of(prog), &source));
}

void budget_print_times(FILE *f, struct bpf_object *const *objs, int n, const char *tool)
{
	struct bpf_program *prog;
	unsigned long total = 0;

	fprintf(f, "%s: load: verifier:", tool);
	for (int i = 0; i < n; i++)
		bpf_object__for_each_program(prog, objs[i])
			print_time(f, prog, &total);
	fprintf(f, " all %.3f s\n", total / 1e6);
	memset(logs, 0, sizeof(logs));
}

void budget_header(FILE *f)
{
	fprintf(f, "%-10s %-12s %-7s %-30s %7s %-4s %4s %s\n", "# tool", "config", "flavour",
		"program", "insns", "from", "stack", "frames");
}

int budget_verdict(const char *tool, int over, int loads_failed)
{
	if (!largest.rows && !loads_failed)
		return 1;	/* nothing loadable here: what the kernel lacks was said */
	fprintf(stderr, "%s: budget: %d programs verified; most instructions %lu (%s), deepest "
		"stack %lu bytes (%s); ceilings %d and %d: %s\n", tool, largest.rows, largest.insns,
		largest.insns_row, largest.stack, largest.stack_row, BUDGET_MAX_INSNS,
		BUDGET_MAX_STACK, over || loads_failed || !largest.rows ? "FAILED" : "ok");
	return over || loads_failed || !largest.rows ? 1 : 0;
}
