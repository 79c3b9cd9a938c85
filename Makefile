# pagetrace top-level build. `make` builds every tool; `make test` runs the
# whole test suite (as root: the tracer tests load BPF and use loop devices).
PREFIX ?= /usr/local
DESTDIR ?=
PYTHON ?= $(CURDIR)/.venv/bin/python
# Sub-projects with a Makefile of their own.
SUBDIRS := lib tracer replay samples

.PHONY: all deps test test-spark bench demo install clean $(SUBDIRS)

all: $(SUBDIRS)

$(SUBDIRS):
	$(MAKE) -C $@

deps:
	scripts/install-deps

test: all
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) -m pytest -ra tests

# The Spark SQL job on a local single-node Spark, against pagetrace merge
# (docs/scale.md). Opt-in: it installs a JVM and pyspark (about 500 MB).
test-spark:
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	command -v java >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless; }
	$(PYTHON) -m pip install -q --disable-pip-version-check -r jobs/requirements.txt
	$(PYTHON) -m pytest -ra jobs

bench: all
	$(PYTHON) bench/run

# The main job end to end: make demo, or make demo APP=firefox.
APP ?= sample
demo:
	scripts/demo --app $(APP)

# The Python scripts are thin entry points into the pagetrace package's
# standard-library core, which they find in share/pagetrace/pagetrace/ (the
# whole package, installed once; numpy and pandas are needed only by the
# analysis verbs, from the venv).
SCRIPTS := scripts/pagetrace scripts/pagecache scripts/startup-bench scripts/resolve-inodes
MAN1 := scripts/pagetrace.1 scripts/pagecache.1 scripts/startup-bench.1

install: all
	for d in $(SUBDIRS); do $(MAKE) -C $$d install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/pagetrace
	install -m 0755 $(SCRIPTS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -d $(DESTDIR)$(PREFIX)/share/pagetrace/pagetrace
	install -m 0644 analysis/pagetrace/*.py $(DESTDIR)$(PREFIX)/share/pagetrace/pagetrace/
	install -d $(DESTDIR)$(PREFIX)/share/pagetrace/examples
	sed 's|@BINDIR@|$(PREFIX)/bin|' docs/examples/pagetrace-launch-example.service \
		> $(DESTDIR)$(PREFIX)/share/pagetrace/examples/pagetrace-launch-example.service

clean:
	for d in $(SUBDIRS); do $(MAKE) -C $$d clean; done
