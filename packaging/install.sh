#!/bin/sh
# install.sh [PREFIX]: install pagetrace @VERSION@ (@ARCH@, static tools)
# under PREFIX (default /usr/local, or $PREFIX): PREFIX/bin/pagetrace-*,
# PREFIX/bin/pagetrace, PREFIX/share/{man,pagetrace,bash-completion}.
# The C tools need nothing else on the host but a kernel with BTF; the
# pagetrace front door and its standard-library tools need python3 >= 3.9.
set -eu
prog=install.sh
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-${PREFIX:-/usr/local}}
machine=$(uname -m)
if [ "$machine" != "@ARCH@" ]; then
	echo "$prog: this is the @ARCH@ tarball and this machine is $machine: use pagetrace-@VERSION@-$machine-linux.tar.gz" >&2
	exit 1
fi
mkdir -p "$prefix" || { echo "$prog: $prefix: cannot create it" >&2; exit 1; }
(cd "$here" && tar -cf - bin share) | (cd "$prefix" && tar -xf - --no-same-owner)
echo "$prog: pagetrace @VERSION@ installed under $prefix"
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
	echo "$prog: note: no python3 >= 3.9 here: the C tools ($prefix/bin/pagetrace-*) work without it; the pagetrace front door does not" >&2
fi
