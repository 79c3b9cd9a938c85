# pagetrace top-level build. `make` builds every tool; `make test` runs the
# whole test suite (as root: the tracer tests load BPF and use loop devices).
PREFIX ?= /usr/local
DESTDIR ?=
PYTHON ?= $(CURDIR)/.venv/bin/python
# Sub-projects with a Makefile of their own.
SUBDIRS := lib tracer replay launch samples diskemu

.PHONY: all deps test test-kernels test-stap test-spark bench demo install clean fuzz-cache fuzz-cache-long $(SUBDIRS)

all: $(SUBDIRS)

$(SUBDIRS):
	$(MAKE) -C $@

deps:
	scripts/install-deps

test: all
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) -m pytest -ra tests --ignore=tests/kernels

# The kernel matrix (docs/kernels.md): Debian's kernels of tests/kernels/list,
# each booted under qemu, the tools checked inside against the kernel's
# ground truth, and tests/cachefuzz.py's random scripts (400 a kernel,
# compared by tests/cachefuzz_check.py); two guests at a time; writes
# docs/kernels.md. KERNELS_TOOLS=DIR checks another tree's built tools;
# KERNELS="6.1 host" a subset; KERNELS_QUICK="5.10" only loads, one trace
# and the random scripts there.
KERNELS_TOOLS ?= $(CURDIR)/tracer
test-kernels: all
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) tests/kernels/fetch $(KERNELS)
	PAGETRACE_KERNELS_TOOLS=$(KERNELS_TOOLS) PAGETRACE_KERNELS_DOC=$(CURDIR)/docs/kernels.md \
	PAGETRACE_KERNELS="$(KERNELS)" PAGETRACE_KERNELS_QUICK="$(KERNELS_QUICK)" \
	$(PYTHON) -m pytest -ra tests/kernels --ignore=tests/kernels/test_stap.py

# readpage.stp in the kernel matrix (tests/kernels/test_stap.py): its module
# compiled on the host for each of STAP_KERNELS (cached by script hash and
# release), checked in a guest against the kernel's ground truth.
STAP_KERNELS ?= 6.1 6.12 7.3
test-stap: all
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) tests/kernels/fetch $(STAP_KERNELS)
	PAGETRACE_STAP_KERNELS="$(STAP_KERNELS)" $(PYTHON) -m pytest -ra tests/kernels/test_stap.py

# The randomized ground truth of the cache tools' counts (tests/cachefuzz.py,
# docs/tracer.md): one seed (make fuzz-cache SEED=N, what a failing seed
# prints), or COUNT seeds from SEED; fuzz-cache-long runs seeds 1-10,000 on
# ext4 and xfs, 1,000 at a time (about 40 min here). As root. The results
# and traces stay in FUZZ_DIR.
SEED ?= 1
COUNT ?= 1
FUZZ_DIR ?= /tmp/pagetrace-fuzz
fuzz-cache: all
	mkdir -p $(FUZZ_DIR)
	python3 tests/cachefuzz.py run --seed $(SEED) --count $(COUNT) --json $(FUZZ_DIR)/fuzz-$(SEED).json
	$(PYTHON) tests/cachefuzz_check.py $(FUZZ_DIR)/fuzz-$(SEED).json

fuzz-cache-long: all
	mkdir -p $(FUZZ_DIR)
	status=0; for start in 1 1001 2001 3001 4001 5001 6001 7001 8001 9001; do \
	  python3 tests/cachefuzz.py run --seed $$start --count 1000 --batch 250 \
	    --json $(FUZZ_DIR)/long-$$start.json || exit 1; \
	  $(PYTHON) tests/cachefuzz_check.py $(FUZZ_DIR)/long-$$start.json || status=1; \
	done; exit $$status

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
# standard-library core and tools, which they find in
# share/pagetrace/pagetrace/ (the whole package, installed once; numpy and
# pandas are needed only by the analysis and scale layers, from the venv).
SCRIPTS := scripts/pagetrace scripts/pagecache scripts/startup-bench scripts/resolve-inodes
# The package and its layers (docs/architecture.md).
PYTHON_PACKAGES := pagetrace pagetrace/core pagetrace/tools pagetrace/tools/startup_bench \
	pagetrace/analysis pagetrace/scale
MAN1 := scripts/pagetrace.1 scripts/pagecache.1 scripts/startup-bench.1

install: all
	for d in $(SUBDIRS); do $(MAKE) -C $$d install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/pagetrace
	install -m 0755 $(SCRIPTS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/
	for d in $(PYTHON_PACKAGES); do \
		install -d $(DESTDIR)$(PREFIX)/share/pagetrace/$$d && \
		install -m 0644 analysis/$$d/*.py $(DESTDIR)$(PREFIX)/share/pagetrace/$$d/ || exit 1; done
	install -m 0644 analysis/pagetrace/VERSION analysis/pagetrace/device-profiles.tsv $(DESTDIR)$(PREFIX)/share/pagetrace/pagetrace/
	install -d $(DESTDIR)$(PREFIX)/share/pagetrace/examples
	sed 's|@BINDIR@|$(PREFIX)/bin|' docs/examples/pagetrace-launch-example.service \
		> $(DESTDIR)$(PREFIX)/share/pagetrace/examples/pagetrace-launch-example.service

clean:
	for d in $(SUBDIRS); do $(MAKE) -C $$d clean; done
