/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Page accesses and page state, shared by trace --used, cachestat and
 * cachetop. Words as in docs/trace-format.md and docs/tracer.md:
 *
 *   access  a page that a read, pread, readv, sendfile or splice asked for
 *           (filemap:mm_filemap_get_pages, clamped to the file size), or the
 *           faulting page of an mmap page fault, one page per fault
 *           (filemap:mm_filemap_fault when the fault goes to the filesystem,
 *           filemap:mm_filemap_map_pages when fault-around serves it);
 *   mapped  a page that fault-around mapped without a fault on it;
 *   miss    the first access to a page read from storage while tracing;
 *   hit     every other access.
 *
 * State per page lives in page_states, one entry per 64 pages of a file
 * (page_state.bpf.h). A full map is reported through on_state_full(), never
 * dropped silently.
 *
 * Where fentry attaches to set_pte_range() and do_set_pmd(), a fault's
 * pages are read where the kernel maps them (pte_hooks.bpf.h), and the
 * fault events are not loaded. Else: the map_pages tracepoint gives only
 * the range fault-around tried. Which
 * page faulted comes from exceptions:page_fault_user/kernel (the address)
 * and its VMA (its file page: vma_lookup.bpf.h); which pages it really
 * mapped comes from the page cache itself, read the way filemap_map_pages()
 * does (present, uptodate, unlocked, no readahead mark).
 *
 * The engine's modules, each on the one before (each includes what it
 * uses): page_state.bpf.h (state), page_cache_walk.bpf.h (the page cache
 * and the chunk walk), pending_pages.bpf.h (pages read from storage),
 * read_calls.bpf.h (read calls), vma_lookup.bpf.h
 * (a fault's VMA), fault_around.bpf.h (a fault and its fault-around),
 * fault_state.bpf.h (what is resolved after the fact), pte_hooks.bpf.h
 * (a fault where its page-table entries are set). A tool includes
 * this header, defines the sinks (sinks.bpf.h) and calls the
 * page_access_*() entry points from its programs, after its own filter
 * (traced tasks).
 */
#ifndef PAGETRACE_PAGE_ACCESS_BPF_H
#define PAGETRACE_PAGE_ACCESS_BPF_H

#include "page_state.bpf.h"
#include "page_cache_walk.bpf.h"
#include "pending_pages.bpf.h"
#include "read_calls.bpf.h"
#include "vma_lookup.bpf.h"
#include "fault_around.bpf.h"
#include "fault_state.bpf.h"
#include "pte_hooks.bpf.h"

#endif /* PAGETRACE_PAGE_ACCESS_BPF_H */
