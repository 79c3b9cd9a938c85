# What the Makefiles of the C tools beside lib/ (replay, launch, diskemu)
# share: install places, compiler and warnings, the .output/ directory,
# lib/'s archive and how it is built, the version from its one file, and
# the headers every object depends on, and the option table's two outputs
# (docs/option-tables.md). Included before a tool's own rules;
# OUTPUT, BIN and LIBPAGETRACE may be set on the command line (build.mk).
.DEFAULT_GOAL := all
PREFIX ?= /usr/local
DESTDIR ?=
CC ?= cc
CFLAGS ?= -O2 -g
WARNINGS := -Wall -Wextra -Werror
OUTPUT := .output
LIBDIR := ../lib
LIBPAGETRACE := $(LIBDIR)/.output/libpagetrace.a
# The version, in one file for C and Python.
VERSION_FILE := ../analysis/pagetrace/VERSION
PAGETRACE_VERSION := $(shell cat $(VERSION_FILE))
HEADERS := $(wildcard *.h) $(wildcard $(LIBDIR)/*.h) $(VERSION_FILE)
# A tool's objects: add its own flags after these.
COMPILE = $(CC) $(CFLAGS) $(WARNINGS) -D_GNU_SOURCE \
	-DPAGETRACE_VERSION='"$(PAGETRACE_VERSION)"' -I$(LIBDIR) -I$(OUTPUT)

# $(call install_tool,TOOL,SECTION): TOOL as pagetrace-TOOL under
# $(PREFIX)/bin, its man page TOOL.SECTION beside the others.
install_tool = install -d $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)$(PREFIX)/share/man/man$(2) && \
	install -m 0755 $(1) $(DESTDIR)$(PREFIX)/bin/pagetrace-$(1) && \
	install -m 0644 $(1).$(2) \
		$(DESTDIR)$(PREFIX)/share/man/man$(2)/pagetrace-$(1).$(2)

$(OUTPUT):
	mkdir -p $@

$(LIBPAGETRACE): $(wildcard $(LIBDIR)/*.c $(LIBDIR)/*.h $(LIBDIR)/Makefile)
	$(MAKE) -s -C $(LIBDIR) OUTPUT=$(abspath $(dir $(LIBPAGETRACE)))

# The tool's options.tsv is the one source of its argp table and key enum
# (option_table.h, included by the file that parses the command line) and
# of the OPTIONS section of its man page MAN_PAGE: `make man` rewrites
# that section between its two marker comments (packaging/option-table.mk).
include ../packaging/option-table.mk
$(OUTPUT)/option_table.h: options.tsv $(OPTION_TABLE_AWK) | $(OUTPUT)
	$(call option_table_c,options.tsv)

.PHONY: man
man:
	$(call option_page,options.tsv,$(MAN_PAGE))
