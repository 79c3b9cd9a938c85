"""diskemu, the emulated spinning disk: every block request of its loop
device reaches the daemon (counted against /proc/diskstats), the data is
the image's, no read completes before the profile's seek and transfer time
(computed here from the profile table, not by the daemon), and nothing is
left mounted or attached after a signal, a killed daemon or parent, a busy
device, or an error."""
import glob
import json
import mmap
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import loopimg
from conftest import REPO
from loopimg import require_root

sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace.tools import diskemu  # noqa: E402

DISKEMU = os.path.join(REPO, "diskemu", "diskemu")


@pytest.fixture(autouse=True)
def _root():
    require_root()


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="pagetrace-diskemu-")
    yield d
    subprocess.run(["rm", "-rf", d])


def random_image(workdir, size=64 << 20, seed=3):
    path = os.path.join(workdir, "disk.img")
    with open(path, "wb") as f:
        f.write(random.Random(seed).randbytes(size))
    return path


def ext4_image(workdir, size_mib=64):
    path = os.path.join(workdir, "fs.img")
    with open(path, "wb") as f:
        f.truncate(size_mib << 20)
    loopimg.run("mkfs.ext4", "-q", "-F", path)
    return path


def attached(device):
    return os.path.exists(f"/sys/block/{os.path.basename(device)}/loop/"
                          "backing_file")


def mounted(point):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == point for line in f)


def fuse_mounts():
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if "diskemu" in line]


def start(*args):
    """diskemu ARGS, once it printed its device (or failed)."""
    proc = subprocess.Popen([DISKEMU, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    device = proc.stdout.readline().strip()
    return proc, device


def assert_nothing_left(device, point=None, timeout=5.0):
    deadline = time.monotonic() + timeout
    while attached(device) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not attached(device), f"{device} still attached"
    if point:
        assert not mounted(point)
    assert fuse_mounts() == []


def read_direct(device, offset, length):
    fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, length)
        n = os.preadv(fd, [buf], offset)
        return bytes(buf[:n])
    finally:
        os.close(fd)


def test_every_request_reaches_the_daemon_with_the_image_data(workdir):
    image = random_image(workdir)
    with open(image, "rb") as f:
        data = f.read()
    rng = random.Random(7)
    wanted = [(rng.randrange(0, (64 << 20) // 4096 - 16) * 4096,
               rng.choice([4096, 8192, 16384, 65536])) for _ in range(60)]
    with diskemu.EmulatedDisk(image, "hdd-7200") as disk:
        reads0 = loopimg.diskstats_field(disk.device, 3)
        sectors0 = loopimg.diskstats_field(disk.device, 5)
        for offset, length in wanted:
            assert read_direct(disk.device, offset, length) == \
                data[offset:offset + length]
        reads = loopimg.diskstats_field(disk.device, 3) - reads0
        sectors = loopimg.diskstats_field(disk.device, 5) - sectors0
        device = disk.device
    assert reads == len(wanted)
    assert disk.stats["reads"] == reads
    assert disk.stats["bytes"] == sectors * 512 == sum(n for _, n in wanted)
    assert_nothing_left(device)


def test_no_read_completes_before_its_seek_and_transfer(workdir):
    """A sparse image the size of the whole disk: each read, timed here,
    takes at least the profile's seek for its distance plus its transfer.
    (No upper bound: a busy machine can delay any read.)"""
    profile = diskemu.load_profiles()["hdd-7200"]
    curve = diskemu.SeekCurve(profile)
    image = os.path.join(workdir, "whole.img")
    with open(image, "wb") as f:
        f.truncate(int(profile["capacity"]) // 4096 * 4096)
    rng = random.Random(11)
    head, short, long_ = None, 0, 0
    with diskemu.EmulatedDisk(image, "hdd-7200") as disk:
        for _ in range(40):
            offset = rng.randrange(0, int(profile["capacity"]) // 4096 - 1) \
                * 4096
            t0 = time.monotonic()
            read_direct(disk.device, offset, 4096)
            took_ms = (time.monotonic() - t0) * 1e3
            if head is not None:
                floor = curve.ms(abs(offset - head)) + \
                    4096 / diskemu.zone_rate(profile, offset) * 1e3
                assert took_ms >= floor
                half = floor + diskemu.rotation_ms(profile)
                short += took_ms < half + 1
                long_ += took_ms > half
            head = offset + 4096
    # Rotation is from the clock: some reads wait under half a turn, some
    # over (each side has probability about 1/2 per read).
    assert short and long_


def test_c_and_python_solve_the_same_seek_curve(workdir):
    image = random_image(workdir, size=1 << 20)
    for name, profile in diskemu.load_profiles().items():
        pred = diskemu.predict(image, name)
        assert pred["boundary_ms"] == pytest.approx(
            diskemu.SeekCurve(profile).boundary_ms, abs=1e-3)
        assert pred["rotation_ms"] == pytest.approx(
            diskemu.rotation_ms(profile), abs=1e-3)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM,
                                 signal.SIGHUP])
def test_a_signal_unmounts_and_detaches_everything(workdir, sig):
    image = ext4_image(workdir)
    point = os.path.join(workdir, "mnt")
    os.mkdir(point)
    proc, device = start("--mount", point, image)
    assert device.startswith("/dev/loop") and mounted(point)
    assert os.listdir(point) == ["lost+found"]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "reads" in err
    assert_nothing_left(device, point)


def test_a_killed_daemon_leaves_no_device(workdir):
    proc, device = start(random_image(workdir))
    assert attached(device)
    proc.kill()
    proc.wait()
    assert_nothing_left(device)


def test_the_daemon_stops_when_its_parent_dies(workdir):
    image = random_image(workdir)
    parent = subprocess.run(
        [sys.executable, "-c",
         "import subprocess, sys\n"
         f"p = subprocess.Popen([{DISKEMU!r}, '--exit-with-parent', "
         f"{image!r}], stdout=subprocess.PIPE, text=True)\n"
         "print(p.stdout.readline().strip(), p.pid, flush=True)\n"],
        capture_output=True, text=True, timeout=30)
    device, pid = parent.stdout.split()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")
    assert_nothing_left(device)


def test_a_device_held_open_is_detached_when_closed(workdir):
    proc, device = start(random_image(workdir))
    fd = os.open(device, os.O_RDONLY)
    try:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 1
        assert f"diskemu: {device}: still open by another process" in err
    finally:
        os.close(fd)
    assert_nothing_left(device)


def test_interrupted_during_fio_leaves_nothing(workdir):
    """Ctrl-C reaches the whole foreground group: the reader and the daemon."""
    proc, device = start(random_image(workdir))
    fio = subprocess.Popen(["fio", "--name=r", f"--filename={device}",
                            "--direct=1", "--rw=randread", "--bs=4k",
                            "--runtime=30", "--time_based"],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    fio.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    fio.wait(timeout=30)
    proc.communicate(timeout=30)
    assert_nothing_left(device)


def loop_devices():
    return sorted(glob.glob("/sys/block/loop*/loop/backing_file"))


@pytest.mark.parametrize("args, message, status", [
    (["--profile", "floppy"], "diskemu: --profile: 'floppy': no such profile",
     1),
    (["--mount", "MOUNT"], "cannot mount", 1),
    ([], None, 0),
])
def test_errors_leave_nothing(workdir, args, message, status):
    image = random_image(workdir, size=1 << 20)
    point = os.path.join(workdir, "mnt")
    os.mkdir(point)
    args = [point if a == "MOUNT" else a for a in args]
    before = loop_devices()
    proc, device = start(*args, image)
    if status == 0:
        proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == status
    if message:
        assert message in err and device == ""
        assert len(err.strip().splitlines()) == 1
    assert loop_devices() == before
    assert not mounted(point) and fuse_mounts() == []


@pytest.mark.parametrize("args, message", [
    (["NOFILE"], "diskemu: NOFILE: No such file or directory"),
    (["ODD"], "is not a positive multiple of 512 bytes"),
    ([], "no IMAGE"),
])
def test_bad_images_are_refused(workdir, args, message):
    odd = os.path.join(workdir, "odd.img")
    with open(odd, "wb") as f:
        f.write(b"x" * 1000)
    nofile = os.path.join(workdir, "none.img")
    args = [odd if a == "ODD" else nofile if a == "NOFILE" else a
            for a in args]
    proc = subprocess.run([DISKEMU, *args], capture_output=True, text=True)
    assert proc.returncode == (2 if not args else 1)
    assert message.replace("NOFILE", nofile) in proc.stderr


def test_help_has_examples():
    out = subprocess.run([DISKEMU, "--help"], capture_output=True,
                         text=True).stdout
    assert "EXAMPLES:" in out and "--profile" in out


# --- replay --device-profile hdd-7200 ----------------------------------

REPLAY = os.path.join(REPO, "replay", "replay")


@pytest.fixture(scope="module")
def image_fs():
    """ext4 in an image on a loop device with a 32 MiB file; (file, mount,
    the image's own loop device)."""
    with loopimg.loop_mount("ext4", 128, ("-q", "-F")) as (mnt, loop):
        data = os.path.join(mnt, "data")
        with open(data, "wb") as f:
            f.write(random.Random(5).randbytes(32 << 20))
        yield data, mnt, loop


def scattered_trace(path, data, pages, seed=1):
    offsets = random.Random(seed).sample(range((32 << 20) // 4096), pages)
    with open(path, "w") as f:
        f.write("# pagetrace-format: 1\n# page-size: 4096\n")
        for i, page in enumerate(offsets):
            f.write(f"{1_700_000_000_000_000 + i} {data} {page * 4096}\n")
    return path


def devices_in_use(before=()):
    """diskemu's loop devices there are, less those in BEFORE (another
    diskemu, an experiment or a parallel session, may be running)."""
    return sorted(p for p in glob.glob("/sys/block/loop*/loop/backing_file")
                  if open(p).read().strip() == "/disk" and p not in before)


def test_replay_reads_from_the_emulated_disk(image_fs, tmp_path):
    """The reads reach diskemu's device, not the image's own loop device
    (whose count in /proc/diskstats moves by a few metadata reads only),
    each paying at least a
    track-to-track seek (1 ms) on hdd-7200; nothing of it is left
    afterwards."""
    data, mnt, loop = image_fs
    trace = scattered_trace(tmp_path / "t.log", data, 100)
    before = devices_in_use()
    reads0 = loopimg.diskstats_field(loop, 3)
    emulated = subprocess.run([REPLAY, "-j", "-q", "--no-group",
                               "--device-profile", "hdd-7200", trace],
                              capture_output=True, text=True, timeout=60)
    assert emulated.returncode == 0, emulated.stderr
    # A few metadata reads (finding the file before the emulated disk is
    # mounted over it), none of the 100 data reads.
    assert loopimg.diskstats_field(loop, 3) - reads0 <= 8
    out = json.loads(emulated.stdout)
    assert out["requests"] == 100
    profile = diskemu.load_profiles()["hdd-7200"]
    assert out["elapsed_s"] >= 100 * profile["t2t_ms"] / 1e3
    assert devices_in_use(before) == [] and fuse_mounts() == []
    assert mounted(mnt)   # the image's own mount, untouched


def test_replay_device_profile_needs_an_image(tmp_path):
    with open(tmp_path / "f", "wb") as f:
        f.write(b"x" * 8192)
    trace = tmp_path / "t.log"
    trace.write_text("# pagetrace-format: 1\n# page-size: 4096\n"
                     f"1700000000000000 {tmp_path / 'f'} 0\n")
    before = devices_in_use()
    ran = subprocess.run([REPLAY, "--device-profile", "hdd-7200", trace],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1
    assert "--device-profile hdd-7200: not on a loop device's image" in \
        ran.stderr
    assert devices_in_use(before) == []


def test_replay_interrupted_on_the_emulated_disk(image_fs, tmp_path):
    data, _, _ = image_fs
    trace = scattered_trace(tmp_path / "t.log", data, 2000, seed=2)
    before = devices_in_use()
    proc = subprocess.Popen([REPLAY, "-q", "--no-group", "--device-profile",
                             "hdd-7200", trace], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    deadline = time.monotonic() + 15
    while devices_in_use(before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert devices_in_use(before) == [] and fuse_mounts() == []


def test_replay_unknown_profile_names_both_kinds(tmp_path):
    ran = subprocess.run([REPLAY, "--device-profile", "floppy", "t.log"],
                         capture_output=True, text=True)
    assert ran.returncode == 2
    assert "'floppy': no such profile" in ran.stderr
    assert "diskemu --list-profiles" in ran.stderr


def read_ahead_kb(device):
    with open(f"/sys/block/{os.path.basename(device)}/queue/"
              "read_ahead_kb") as f:
        return int(f.read())


def sequential_buffered_reads(device, nbytes=16 << 20):
    """The device's reads (/proc/diskstats) for NBYTES read from its
    start in 4 KiB buffered reads: about NBYTES / read-ahead."""
    reads0 = loopimg.diskstats_field(device, 3)
    fd = os.open(device, os.O_RDONLY)
    try:
        for offset in range(0, nbytes, 4096):
            assert len(os.pread(fd, 4096, offset)) == 4096
    finally:
        os.close(fd)
    return loopimg.diskstats_field(device, 3) - reads0


# 2560 first: the default's run then usually gets the same loop device
# back, with 2560 left in it.
@pytest.mark.parametrize("args, kb", [(["--read-ahead", "2560"], 2560),
                                      ([], 128)])
def test_the_device_read_ahead_is_set(workdir, args, kb):
    """--read-ahead (128 KiB by default, a SATA disk's) is the device's
    read_ahead_kb whatever the loop device had before, and buffered
    sequential reads come in requests of that size: 16 MiB in 4 KiB reads
    take at least 16 MiB / 128 KiB = 128 device reads at 128 KiB, fewer
    than half that at 2560 KiB (requests of up to 1 MiB, FUSE's)."""
    image = random_image(workdir)
    proc, device = start(*args, image)
    try:
        assert device.startswith("/dev/loop")
        assert read_ahead_kb(device) == kb
        reads = sequential_buffered_reads(device)
        if kb == 128:
            assert reads >= 128
        else:
            assert reads < 64
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert_nothing_left(device)


def test_bad_read_ahead_is_a_usage_error(workdir):
    result = subprocess.run([DISKEMU, "--read-ahead", "-1", "x.img"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == "diskemu: --read-ahead: '-1': not a whole number\n"
    result = subprocess.run([DISKEMU, "--read-ahead", "1048577", "x.img"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == ("diskemu: --read-ahead: '1048577': not from 0 to "
                             "1048576\n")
