"""scripts/check-core, the CO-RE relocation audit (`make check-core`): it
fails on a read of a field the kernel lacks that no existence test guards,
passes the same read behind one, and passes the tracer's own objects against
this machine's BTF. Compiling and bpftool only: nothing loaded."""
import os
import subprocess

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit

CHECK_CORE = os.path.join(REPO, "scripts", "check-core")
HOST_BTF = "/sys/kernel/btf/vmlinux"
# A kernel type with a field no kernel has; GUARD and TYPE vary per case.
SOURCE = """typedef unsigned int __u32; typedef unsigned long long __u64;
typedef int __s32; typedef long long __s64; typedef unsigned short __u16;
typedef unsigned char __u8; typedef __u32 __be32; typedef __u16 __be16;
typedef __u32 __wsum;
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
struct TYPE { int pagetrace_no_such_field; } __attribute__((preserve_access_index));
SEC("raw_tp/sched_switch")
int prog(void *ctx)
{
	struct TYPE *t = (void *)bpf_get_current_task();
	GUARD
	return BPF_CORE_READ(t, pagetrace_no_such_field);
}
char LICENSE[] SEC("license") = "GPL";
"""
GUARD = "if (!bpf_core_field_exists(t->pagetrace_no_such_field)) return 0;"


def build(tmp_path, name, type_name="task_struct", guard=""):
    src = tmp_path / f"{name}.bpf.c"
    src.write_text(SOURCE.replace("TYPE", type_name).replace("GUARD", guard))
    obj = tmp_path / f"{name}.bpf.o"
    subprocess.run(["clang", "-g", "-O2", "-target", "bpf", "-c", str(src), "-o", str(obj)],
                   check=True)
    return str(obj)


def check_core(*args):
    return subprocess.run([CHECK_CORE, *args], capture_output=True, text=True)


@pytest.fixture(autouse=True)
def host_btf():
    if not os.access(HOST_BTF, os.R_OK):
        pytest.fail(f"{HOST_BTF}: unreadable; the tracer needs BTF")


def test_an_unguarded_read_of_a_missing_field_fails(tmp_path):
    run = check_core("--btf", f"host={HOST_BTF}", build(tmp_path, "bare"))
    assert run.returncode == 1, run.stdout + run.stderr
    assert ("check-core: host: bare.bpf.o: raw_tp/sched_switch: byte_off "
            "task_struct.pagetrace_no_such_field: no target, no existence test") in run.stdout
    assert "1 object-kernel pairs, 1 unguarded relocations" in run.stdout


def test_the_same_read_behind_an_existence_test_passes(tmp_path):
    run = check_core("--btf", f"host={HOST_BTF}", build(tmp_path, "guarded", guard=GUARD))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 object-kernel pairs, 0 unguarded relocations" in run.stdout


def test_a_flavour_is_the_alternative_of_another(tmp_path):
    obj = build(tmp_path, "flavour", type_name="task_struct___gone")
    run = check_core("--btf", f"host={HOST_BTF}", obj)
    assert run.returncode == 0, run.stdout + run.stderr


def test_missing_inputs_are_one_line_and_exit_2(tmp_path):
    run = check_core("--btf", str(tmp_path / "none.btf"), build(tmp_path, "bare"))
    assert run.returncode == 2
    assert run.stderr.startswith("check-core: ") and "no such BTF" in run.stderr
    run = check_core("--btf", HOST_BTF, str(tmp_path / "none.bpf.o"))
    assert run.returncode == 2 and "no such object" in run.stderr


def test_the_tracers_objects_pass_against_this_kernel():
    subprocess.run(["make", "-s", "-C", os.path.join(REPO, "tracer")], check=True,
                   capture_output=True)
    out = os.path.join(REPO, "tracer", ".output")
    run = check_core("--btf", f"host={HOST_BTF}", os.path.join(out, "trace.bpf.o"),
                     os.path.join(out, "cache.bpf.o"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 object-kernel pairs, 0 unguarded relocations" in run.stdout
