/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The verifier's budget of each BPF program a tool loads: the instructions
 * it verified and its stack, measured on the running kernel, printed one row
 * a program (trace --budget, cachestat --budget), and held to the project's
 * ceilings, half the verifier's: BUDGET_MAX_INSNS of its 1,000,000 and
 * BUDGET_MAX_STACK of its 512 bytes.
 *
 * The instructions are bpf_prog_info.verified_insns (kernels >= 5.16), else
 * the verifier log's "processed N insns". The stack is the deepest chain of
 * calls (bpf-to-bpf, and bpf_loop's callbacks), each frame the log's "stack
 * depth A+B+..." rounded up to 32 bytes and summed, the verifier's rule
 * before 6.8 (since, 16 with a JIT). The frames are printed after bpf_loop's
 * inlining adds 24 bytes to a caller that the verifier's own check did not
 * count: an upper bound of what it checked, and of the stack used. 7.3
 * prints "stack depth max N" instead: N is taken as it is. A line of any
 * other form fails the budget, never reads as 0.
 */
#ifndef PAGETRACE_BPF_BUDGET_H
#define PAGETRACE_BPF_BUDGET_H

#include <stdbool.h>
#include <stdio.h>

struct bpf_object;

#define BUDGET_MAX_INSNS	500000
#define BUDGET_MAX_STACK	448

/* Before bpf_object__load: ask for the verifier's statistics of each program it will load. */
int budget_prepare(struct bpf_object *obj);
/* The same for one more object, the logs of those prepared before kept. */
int budget_prepare_more(struct bpf_object *obj);
/* Forget the logs prepared so far. */
void budget_forget(void);
/*
 * After a load (@loaded: it succeeded): one row per loaded program on @f, as
 * TOOL CONFIG FLAVOUR PROGRAM INSNS SOURCE STACK FRAMES; forgets the logs.
 * Returns how many programs exceed a ceiling (each said on stderr).
 */
int budget_report(FILE *f, struct bpf_object *obj, bool loaded, const char *tool,
		  const char *config, const char *flavour);
/*
 * After the loads prepared by budget_prepare (@objs, @n of them, loaded):
 * each program's verification time, as the verifier's log says it, and its
 * instructions, on one line "TOOL: load: verifier: ..."; forgets the logs.
 */
void budget_print_times(FILE *f, struct bpf_object *const *objs, int n, const char *tool);
/*
 * The header of the rows; and the last line, the largest figures and the
 * verdict (none when nothing could load: the kernel's lacks were said).
 */
void budget_header(FILE *f);
int budget_verdict(const char *tool, int over, int loads_failed);

#endif /* PAGETRACE_BPF_BUDGET_H */
