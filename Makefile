# pagetrace top-level build. `make` builds every tool; `make test` runs the
# whole test suite (as root: the tracer tests load BPF and use loop devices).
PREFIX ?= /usr/local
DESTDIR ?=
PYTHON ?= $(CURDIR)/.venv/bin/python
# Sub-projects with a Makefile of their own.
SUBDIRS := lib tracer replay launch samples diskemu

.PHONY: all check-core check-headers deps test test-all test-arm64 test-containers test-dist static dist install-share wheel test-wheel deb test-deb test-kernels test-stap test-spark bench demo install clean fuzz fuzz-cache fuzz-cache-long $(SUBDIRS)

all: $(SUBDIRS)

$(SUBDIRS):
	$(MAKE) -C $@

# lib/'s archive is linked by the others: built once, before them (with -j,
# two makes in lib/ at once raced on it).
tracer replay launch diskemu: lib

deps:
	env -u PYTHON scripts/install-deps

# Each run by its own target after the packaging it checks (make test-dist,
# test-wheel, test-deb), not by make test.
PACKAGING_TESTS := tests/test_dist.py tests/test_wheel.py tests/test_deb.py
# On a fresh clone `sudo make test` runs the install step first (Debian's
# packages and .venv/: scripts/install-deps), before the build needs them.
# .venv/bin/pagetrace is the install's last step: one cut short runs again.
INSTALLED := $(CURDIR)/.venv/bin/pagetrace
$(INSTALLED):
	@[ "$$(id -u)" -eq 0 ] || { echo "make: no .venv/ yet: run sudo make test (it runs scripts/install-deps first)" >&2; exit 1; }
	@echo "make: no .venv/ yet: scripts/install-deps first" >&2
	env -u PYTHON scripts/install-deps
ifneq ($(filter test,$(MAKECMDGOALS)),)
$(SUBDIRS): | $(INSTALLED)
endif
test: all | $(INSTALLED)
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) -m pytest -ra tests --durations=12 --ignore=tests/kernels --ignore=tests/test_containers.py $(PACKAGING_TESTS:%=--ignore=%)

# Containers started by a real runtime (tests/test_containers.py): docker.io's
# dockerd, started and stopped by the tests; scripts/install-deps --containers.
test-containers: all
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) -m pytest -ra tests/test_containers.py

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
	$(if $(filter arm64-%,$(KERNELS)),$(MAKE) static ARCH=arm64)
	PAGETRACE_KERNELS_TOOLS=$(KERNELS_TOOLS) PAGETRACE_KERNELS_DOC=$(CURDIR)/docs/kernels.md \
	PAGETRACE_KERNELS="$(KERNELS)" PAGETRACE_KERNELS_QUICK="$(KERNELS_QUICK)" \
	$(PYTHON) -m pytest -ra tests/kernels --ignore=tests/kernels/test_stap.py

# Which tracer/*.bpf.h compile alone, each in an empty .bpf.c (the kernel's
# header tests); lists those that do not, exit 1 then. make test runs it
# (tests/test_bpf_modules.py). ARCH=arm64: for arm64, against the vmlinux.h
# of the arm64 static build (from the arm64 kernel's BTF, below).
CHECK_HEADERS_OUT = $(if $(filter arm64,$(ARCH)),$(STATIC_DIR)/obj/tracer,$(CURDIR)/tracer/.output)
check-headers:
	$(if $(filter arm64,$(ARCH)),@test -r $(VMLINUX_BTF) || python3 tests/kernels/fetch --btf $(ARM64_BTF_KERNEL))
	$(MAKE) -s -C tracer OUTPUT=$(CHECK_HEADERS_OUT) $(CHECK_HEADERS_OUT)/vmlinux.h
	scripts/check-headers $(if $(filter arm64,$(ARCH)),--arch arm64) --output $(CHECK_HEADERS_OUT) tracer

# Every CO-RE relocation of the tracer's BPF objects that a kernel's BTF
# leaves unresolved is guarded by an existence test or a flavour
# (scripts/check-core; nothing loaded): the x86 build's objects against the
# saved BTF of CORE_KERNELS, ARCH=arm64 the arm64 static build's against
# CORE_KERNELS_ARM64 (each BTF fetched once). 5.10 is not among them: it has
# no struct folio, its folio reads are behind tests of their own, and only
# trace's bio programs load there (the matrix boots it).
KERNELS_CACHE = $(or $(PAGETRACE_KERNELS_CACHE),/var/lib/pagetrace-kernels)
CORE_KERNELS ?= 6.1 6.12 7.3
CORE_KERNELS_ARM64 ?= arm64-6.1 arm64-6.12 arm64-7.3
CORE_BTF = $(if $(filter arm64,$(ARCH)),$(KERNELS_CACHE)/arm64/$(1)/vmlinux.btf,$(KERNELS_CACHE)/$(1)/vmlinux.btf)
CORE_NAMES = $(if $(filter arm64,$(ARCH)),$(CORE_KERNELS_ARM64),$(CORE_KERNELS))
CORE_OBJ = $(if $(filter arm64,$(ARCH)),$(STATIC_DIR)/obj/tracer,$(CURDIR)/tracer/.output)
check-core:
	$(if $(filter arm64,$(ARCH)),$(MAKE) static ARCH=arm64,$(MAKE) -C tracer)
	@for k in $(CORE_NAMES); do test -r $(call CORE_BTF,$$k) || python3 tests/kernels/fetch --btf $$k > /dev/null || exit 1; done
	scripts/check-core $(foreach k,$(CORE_NAMES),--btf $(k)=$(call CORE_BTF,$(k))) \
		$(if $(filter arm64,$(ARCH)),,--btf host=/sys/kernel/btf/vmlinux) \
		$(CORE_OBJ)/trace.bpf.o $(CORE_OBJ)/cache.bpf.o

# readpage.stp in the kernel matrix (tests/kernels/test_stap.py): its module
# compiled on the host for each of STAP_KERNELS (cached by script hash and
# release), checked in a guest against the kernel's ground truth.
STAP_KERNELS ?= 6.1 6.12 7.3
test-stap: all
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) tests/kernels/fetch $(STAP_KERNELS)
	PAGETRACE_STAP_KERNELS="$(STAP_KERNELS)" $(PYTHON) -m pytest -ra tests/kernels/test_stap.py

# The arm64 quick check (CI's step arm64; test-all runs the arm64 rows in
# full; docs/kernels.md, "arm64"): Debian's arm64 6.1 (its faults from the
# fault events, the fault start a kprobe) and 6.12 (from the PTE hooks)
# under qemu-system-aarch64, the static arm64 tools loaded, one cold trace
# (tp_btf and raw_tp) against mincore, the budget, the faults' source, and
# ARM64_QUICK_SEEDS's random scripts (COUNT on ext4, COUNT on xfs),
# compared exactly. Writes no docs/kernels.md.
ARM64_QUICK_KERNELS ?= arm64-6.1 arm64-6.12
ARM64_QUICK_SEEDS ?= 1001 50
empty :=
test-arm64:
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) tests/kernels/fetch $(ARM64_QUICK_KERNELS)
	$(MAKE) static ARCH=arm64
	$(MAKE) check-core ARCH=arm64
	PAGETRACE_KERNELS="$(ARM64_QUICK_KERNELS)" PAGETRACE_KERNELS_QUICK="$(ARM64_QUICK_KERNELS)" \
	PAGETRACE_KERNELS_FUZZ_SEEDS="$(ARM64_QUICK_SEEDS)" \
	$(PYTHON) -m pytest -ra tests/kernels \
		-k "$(subst $(empty) $(empty), or ,$(addsuffix -,$(ARM64_QUICK_KERNELS)))"

# Everything the project proves, where .ci/run (what gates a landing, under
# 50 minutes on a fresh machine) runs a part: the suite; every kernel of the
# matrix in full, the arm64 rows among them (docs/kernels.md, rendered with
# the commit its results came from); readpage.stp's modules compiled for
# each kernel; containers and packages; the 10,000 + 10,000 random scripts.
# Hours on this 2-core machine; each part also runs alone by its target.
ALL_KERNELS ?= 5.10 6.1 6.12 7.3 host arm64-6.1 arm64-6.12 arm64-7.3
test-all: all
	$(MAKE) test
	$(MAKE) test-kernels KERNELS="$(ALL_KERNELS)" KERNELS_QUICK= PAGETRACE_KERNELS_BUDGET=14400
	$(MAKE) test-stap
	$(MAKE) test-containers test-dist test-wheel test-deb
	$(MAKE) fuzz-cache-long

# The randomized ground truth of the cache tools' counts (tests/cachefuzz.py,
# docs/tracer.md): one seed (make fuzz-cache SEED=N, what a failing seed
# prints), or COUNT seeds from SEED; fuzz-cache-long runs the first 10,000
# seeds on ext4 and xfs, 1,000 at a time (about 40 min here). As root. The results
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

# libFuzzer (clang, ASan, UBSan) on every parser of outside input, each
# for FUZZ_S seconds, or FUZZ_RUNS executions (fuzz/Makefile lists them).
FUZZ_S ?= 60
fuzz:
	$(MAKE) -C fuzz run FUZZ_S=$(FUZZ_S) $(if $(FUZZ_RUNS),FUZZ_RUNS=$(FUZZ_RUNS))

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

install: all install-share
	for d in $(SUBDIRS); do $(MAKE) -C $$d install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/share/pagetrace/examples
	sed 's|@BINDIR@|$(PREFIX)/bin|' docs/examples/pagetrace-launch-example.service \
		> $(DESTDIR)$(PREFIX)/share/pagetrace/examples/pagetrace-launch-example.service
	sed 's|@BINDIR@|$(PREFIX)/bin|; s|@EXAMPLES@|$(PREFIX)/share/pagetrace/examples|' \
		docs/examples/pagetrace-launch.conf > $(DESTDIR)$(PREFIX)/share/pagetrace/examples/pagetrace-launch.conf

# What every install shares, whatever builds the C tools (make install,
# the tarball, the deb): the scripts, their man pages, the package, the
# bash completion (one file, packaging/pagetrace.bash, linked by each name).
COMPLETION_NAMES := pagetrace pagecache startup-bench resolve-inodes \
	$(addprefix pagetrace-,trace cachestat cachetop replay launch readpage diskemu)
COMPLETION_DIR := share/bash-completion/completions
install-share:
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/pagetrace
	install -m 0755 $(SCRIPTS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/
	for d in $(PYTHON_PACKAGES); do \
		install -d $(DESTDIR)$(PREFIX)/share/pagetrace/$$d && \
		install -m 0644 analysis/$$d/*.py $(DESTDIR)$(PREFIX)/share/pagetrace/$$d/ || exit 1; done
	install -m 0644 analysis/pagetrace/VERSION analysis/pagetrace/device-profiles.tsv $(DESTDIR)$(PREFIX)/share/pagetrace/pagetrace/
	install -d $(DESTDIR)$(PREFIX)/$(COMPLETION_DIR)
	install -m 0644 packaging/pagetrace.bash $(DESTDIR)$(PREFIX)/$(COMPLETION_DIR)/pagetrace
	for n in $(filter-out pagetrace,$(COMPLETION_NAMES)); do \
		ln -sf pagetrace $(DESTDIR)$(PREFIX)/$(COMPLETION_DIR)/$$n || exit 1; done

# The static build (docs/install.md): trace, cachestat, cachetop, replay
# and launch linked statically (libbpf, libelf, zlib, glibc) into
# build/static-ARCH/, the BPF embedded as skeletons; the normal build is
# left as it is. Another architecture: ARCH=arm64
# CROSS_COMPILE=aarch64-linux-gnu- VMLINUX_BTF=FILE (libraries from the
# :arm64 packages). `make dist` puts them in
# dist/pagetrace-VERSION-ARCH-linux.tar.gz with the Python core, the man
# pages, the completion and install.sh (packaging/make-tarball).
VERSION := $(shell cat analysis/pagetrace/VERSION)
# ARCH=arm64 alone: the cross compiler, and for the BPF's vmlinux.h the BTF
# of Debian's arm64 6.12 (tests/kernels/list-arm64), cut out of its package
# once into the kernels' cache (as root; docs/kernels.md, "arm64").
ifeq ($(ARCH),arm64)
CROSS_COMPILE ?= aarch64-linux-gnu-
ARM64_BTF_KERNEL ?= arm64-6.12
VMLINUX_BTF ?= $(KERNELS_CACHE)/arm64/$(ARM64_BTF_KERNEL)/vmlinux.btf
export CROSS_COMPILE VMLINUX_BTF
endif
DIST_ARCH ?= $(if $(CROSS_COMPILE),$(patsubst %-linux-gnu-,%,$(CROSS_COMPILE)),$(shell uname -m))
STATIC_DIR := $(CURDIR)/build/static-$(DIST_ARCH)
STATIC_FLAGS = STATIC=1 BIN=$(STATIC_DIR) LIBPAGETRACE=$(STATIC_DIR)/obj/lib/libpagetrace.a
DIST_TARBALL := dist/pagetrace-$(VERSION)-$(DIST_ARCH)-linux.tar.gz
static:
	@CC="$(if $(CROSS_COMPILE),$(CROSS_COMPILE)gcc,$(CC))" packaging/check-deps static
	$(if $(filter arm64,$(ARCH)),@test -r $(VMLINUX_BTF) || python3 tests/kernels/fetch --btf $(ARM64_BTF_KERNEL))
	$(MAKE) -C tracer $(STATIC_FLAGS) OUTPUT=$(STATIC_DIR)/obj/tracer $(addprefix $(STATIC_DIR)/,trace cachestat cachetop)
	$(MAKE) -C replay $(STATIC_FLAGS) OUTPUT=$(STATIC_DIR)/obj/replay $(STATIC_DIR)/replay
	$(MAKE) -C launch $(STATIC_FLAGS) OUTPUT=$(STATIC_DIR)/obj/launch $(STATIC_DIR)/launch

dist: static
	@packaging/check-deps dist
	STRIP=$(CROSS_COMPILE)strip packaging/make-tarball $(STATIC_DIR) $(DIST_ARCH) $(DIST_TARBALL)

# The analysis package as a wheel and an sdist (analysis/pyproject.toml):
# `pip install 'pagetrace[analysis]'` gives every analysis verb on a trace
# from elsewhere, with no C tool (tests/test_wheel.py).
wheel:
	@PYTHON=$(PYTHON) packaging/check-deps wheel
	$(PYTHON) -m build --outdir dist analysis
	rm -rf analysis/build

test-wheel: wheel
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	$(PYTHON) -m pytest -ra tests/test_wheel.py

# The Debian package (debian/, packaging/make-deb): the tools as
# /usr/sbin/pagetrace-*, the front door /usr/bin/pagetrace, the package
# for Debian's python3; test-deb installs it into a fresh Debian 12 root
# (tests/test_deb.py; mmdebstrap's root cached in /var/cache/pagetrace).
DEB := dist/pagetrace_$(VERSION)_$(shell dpkg --print-architecture 2>/dev/null).deb
deb:
	@packaging/check-deps deb
	packaging/make-deb $(DEB)

test-deb: deb
	@packaging/check-deps test-deb
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	PAGETRACE_DEB=$(CURDIR)/$(DEB) $(PYTHON) -m pytest -ra tests/test_deb.py

# The tarball in an empty root (tests/test_dist.py): as root.
test-dist: dist
	@test -x $(PYTHON) || { echo "make: no $(PYTHON): run scripts/install-deps first" >&2; exit 1; }
	PAGETRACE_DIST_TARBALL=$(CURDIR)/$(DIST_TARBALL) $(PYTHON) -m pytest -ra tests/test_dist.py

# The OPTIONS sections of the C tools' man pages, rewritten from their
# option tables (docs/option-tables.md).
.PHONY: man
man:
	for d in launch replay diskemu tracer; do $(MAKE) -C $$d man || exit 1; done

clean:
	for d in $(SUBDIRS); do $(MAKE) -C $$d clean; done
	rm -rf build dist
