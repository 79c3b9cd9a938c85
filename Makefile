# pagetrace top-level build. `make` builds every tool; `make test` runs the
# whole test suite (as root: the tracer tests load BPF and use loop devices).
PREFIX ?= /usr/local
DESTDIR ?=
PYTHON ?= $(CURDIR)/.venv/bin/python
# Sub-projects with a Makefile of their own.
SUBDIRS := tracer replay samples

.PHONY: all deps test bench demo install clean $(SUBDIRS)

all: $(SUBDIRS)

$(SUBDIRS):
	$(MAKE) -C $@

deps:
	scripts/install-deps

test: all
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) -m pytest -ra tests

bench: all
	$(PYTHON) -m pytest -ra -s benchmarks

install: all
	for d in $(SUBDIRS); do $(MAKE) -C $$d install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/bin
	for s in scripts/pagecache scripts/startup-bench scripts/resolve-inodes; do \
		[ ! -f $$s ] || install -m 0755 $$s $(DESTDIR)$(PREFIX)/bin/; done

clean:
	for d in $(SUBDIRS); do $(MAKE) -C $$d clean; done
