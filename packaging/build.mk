# The C Makefiles' two builds, shared: the normal one (dynamic, the tools
# beside their sources) and the static one (`make static`, `make dist`:
# every tool linked statically, libbpf, libelf, zlib and glibc, into
# build/static-ARCH/). Set on the command line:
#   OUTPUT=DIR          intermediates (default .output)
#   BIN=DIR             where the tools are linked (default: beside the sources)
#   LIBPAGETRACE=FILE   lib/'s archive (built with the same flags)
#   STATIC=1            -static; lib/userdb.c reads /etc/passwd and /etc/group
#                       itself (a static glibc cannot load the host's NSS)
#   CROSS_COMPILE=PFX   PFX-gcc and PFX-ar (e.g. aarch64-linux-gnu-), with
#                       ARCH=arm64 and VMLINUX_BTF for the tracer's BPF
BIN ?= .
ifneq ($(CROSS_COMPILE),)
CC := $(CROSS_COMPILE)gcc
AR := $(CROSS_COMPILE)ar
endif
ifeq ($(STATIC),1)
CFLAGS += -DPAGETRACE_STATIC
LDFLAGS += -static
endif
