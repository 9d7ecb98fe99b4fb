"""Unpacking an untrusted upload: hostile archives are refused whole and leave nothing; good ones unpack.

Every hostile archive is built here, one per rule, and each test checks the
exact sentence a user sees (naming the first bad entry) and that nothing is
left anywhere under the test's folder: no destination, no staging folder.
The good cases unpack every accepted layout from .tar, .tar.gz and .zip and
check the Tasks found, the bytes (CRLF kept) and the normalised modes.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import struct
import tarfile
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

import pytest

from amber_pipeline.benchmarks.intake.archive import LIMITS, ArchiveRejected, Limits, unpack
from amber_pipeline.benchmarks.tasks import find_task_dirs
from amber_pipeline.errors import AmberError

TOML = b'version = "1.0"\n'
SCRIPT = b"#!/bin/bash\necho done\n"
SUFFIX = {"tar": ".tar", "tar.gz": ".tar.gz", "zip": ".zip"}
ONLY = " (only files and folders are allowed)"


# --- building archives ---------------------------------------------------------------------------------------------

def member(name: str, data: bytes | None = b"", mode: int = 0o644, kind: bytes = tarfile.REGTYPE,
           link: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if data is None else kind
    info.size = len(data) if data is not None and kind == tarfile.REGTYPE else 0
    info.mode, info.linkname = mode, link
    info.mtime, info.uid, info.gid, info.uname, info.gname = 315532800, 12345, 12345, "someone", "others"
    return info, data


def write_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz" if path.name.endswith(".gz") else "w") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if info.isreg() and data else None)
    return path


def write_zip(path: Path, entries: list[tuple[str, bytes | None, int]]) -> Path:
    """(name, data or None for a folder, unix mode with its file type bits)."""
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate names the tests write on purpose
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name if data is not None or name.endswith("/") else name + "/")
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data or b"")
    return path


def write(path: Path, files: dict[str, bytes | tuple[bytes, int]], folders: tuple[str, ...] = ()) -> Path:
    """An archive of these files (data, or (data, mode)) and folder entries, in the format its suffix says."""
    norm = {n: d if isinstance(d, tuple) else (d, 0o644) for n, d in files.items()}
    if path.suffix == ".zip":
        return write_zip(path, [(f, None, stat.S_IFDIR | 0o700) for f in folders]
                         + [(n, d, stat.S_IFREG | m) for n, (d, m) in norm.items()])
    return write_tar(path, [member(f, None, 0o700) for f in folders] + [member(n, d, m) for n, (d, m) in norm.items()])


def patch_zip(path: Path, name: str, flags: int = 0, file_size: int | None = None) -> None:
    """Rewrite one entry's flag bits or declared size, in its local header and the central directory alike."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
    struct.pack_into("<H", data, info.header_offset + 6, info.flag_bits | flags)
    if file_size is not None:
        struct.pack_into("<I", data, info.header_offset + 22, file_size)
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        (length,) = struct.unpack_from("<H", data, at + 28)
        if data[at + 46:at + 46 + length] == name.encode():
            struct.pack_into("<H", data, at + 8, info.flag_bits | flags)
            if file_size is not None:
                struct.pack_into("<I", data, at + 24, file_size)
        at = data.find(b"PK\x01\x02", at + 1)
    path.write_bytes(bytes(data))


def task(prefix: str = "") -> dict[str, bytes | tuple[bytes, int]]:
    return {f"{prefix}task.toml": TOML, f"{prefix}instruction.md": b"Do it.\n",
            f"{prefix}environment/Dockerfile": b"FROM amber-base:bookworm\n",
            f"{prefix}solution/solve.sh": (SCRIPT, 0o755), f"{prefix}tests/test.sh": (SCRIPT, 0o755)}


# --- checking that nothing stays -----------------------------------------------------------------------------------

@pytest.fixture
def place(tmp_path: Path) -> Path:
    """Where archives are written; the destination is always tmp_path/uploads/bench."""
    (tmp_path / "in").mkdir()
    (tmp_path / "uploads").mkdir()
    return tmp_path / "in"


def snapshot(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(path: Path, limits: Limits = LIMITS) -> str:
    """The sentence an archive is refused with, having checked it left nothing behind."""
    root = path.parents[1]
    before = snapshot(root)
    with pytest.raises(ArchiveRejected) as caught:
        unpack(path, root / "uploads" / "bench", limits)
    message = str(caught.value)
    assert "\n" not in message
    assert snapshot(root) == before
    assert not any((root / "uploads").iterdir())
    return message


def sentence(problem: str) -> str:
    return f"The archive is refused: {problem}; nothing of it was kept."


@pytest.fixture
def bytes_written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every byte unpacking writes to a file, counted at the system call."""
    written = [0]
    real = os.write

    def counting(fd: int, data: bytes | memoryview) -> int:
        n = real(fd, data)
        if fd > 2:
            written[0] += n
        return n

    monkeypatch.setattr(os, "write", counting)
    return written


# --- entries that are not files or folders -------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_a_tar_symbolic_link_is_refused(place, suffix):
    path = write_tar(place / f"up{suffix}", [member("t/task.toml", TOML),
                                             member("t/passwd", kind=tarfile.SYMTYPE, link="/etc/passwd"),
                                             member("t/../../evil", b"x")])
    assert refused(path) == sentence('entry "t/passwd" is a symbolic link' + ONLY)  # the first bad entry


def test_a_zip_symbolic_link_is_refused(place):
    path = write_zip(place / "up.zip", [("t/task.toml", TOML, stat.S_IFREG | 0o644),
                                        ("t/passwd", b"/etc/passwd", stat.S_IFLNK | 0o777)])
    assert refused(path) == sentence('entry "t/passwd" is a symbolic link' + ONLY)


def test_a_hard_link_is_refused(place):
    path = write_tar(place / "up.tar", [member("t/task.toml", TOML),
                                        member("t/shadow", kind=tarfile.LNKTYPE, link="t/task.toml")])
    assert refused(path) == sentence('entry "t/shadow" is a hard link' + ONLY)


@pytest.mark.parametrize(("kind", "what"), [(tarfile.CHRTYPE, "a character device"),
                                            (tarfile.BLKTYPE, "a block device"),
                                            (tarfile.FIFOTYPE, "a FIFO (named pipe)"),
                                            (b"V", "a special file")])
def test_devices_fifos_and_special_entries_are_refused(place, kind, what):
    path = write_tar(place / "up.tar.gz", [member("t/task.toml", TOML), member("t/dev", kind=kind)])
    assert refused(path) == sentence(f'entry "t/dev" is {what}' + ONLY)


def test_a_zip_device_entry_is_refused(place):
    path = write_zip(place / "up.zip", [("t/task.toml", TOML, stat.S_IFREG | 0o644),
                                        ("t/fifo", b"", stat.S_IFIFO | 0o644)])
    assert refused(path) == sentence('entry "t/fifo" is a FIFO (named pipe)' + ONLY)


def test_an_encrypted_zip_entry_is_refused(place):
    path = write(place / "up.zip", task("t/"))
    patch_zip(path, "t/instruction.md", flags=0x1)
    assert refused(path) == sentence('entry "t/instruction.md" is encrypted (upload it without a password)')


# --- paths ---------------------------------------------------------------------------------------------------------

ABSOLUTE = "has an absolute path (use paths relative to the archive's root)"


@pytest.mark.parametrize(("suffix", "name", "problem"), [
    (".tar", "/etc/evil.sh", ABSOLUTE),
    (".zip", "/etc/evil.sh", ABSOLUTE),
    (".zip", "C:/Windows/evil.sh", ABSOLUTE),
    (".tar.gz", "c:evil.sh", ABSOLUTE),
    (".zip", "../evil.sh", 'has a ".." in its path'),
    (".zip", "a/../../evil", 'has a ".." in its path'),
    (".tar.gz", "a/../../etc/passwd", 'has a ".." in its path'),
    (".tar", "t/..", 'has a ".." in its path'),
    (".zip", "t\\..\\evil.sh", "has a backslash in its path (use forward slashes)"),
    (".tar", "t\\evil.sh", "has a backslash in its path (use forward slashes)"),
])
def test_paths_outside_the_archive_or_with_backslashes_are_refused(place, suffix, name, problem):
    path = write(place / f"up{suffix}", {**task("t/"), name: SCRIPT})
    assert refused(path) == sentence(f'entry "{name}" {problem}')


@pytest.mark.parametrize(("suffix", "name", "shown", "problem"), [
    (".zip", "t/a\x00b.sh", '"t/a\\x00b.sh"', "has a control character in its name"),
    (".tar", "t/line\nbreak", '"t/line\\x0abreak"', "has a control character in its name"),
    (".zip", "t/bell\x07", '"t/bell\\x07"', "has a control character in its name"),
    (".tar.gz", "t/" + "x" * 256, '"t/' + "x" * 198 + '..."', "has a name longer than 255 bytes"),
])
def test_names_with_control_characters_or_too_long_are_refused(place, suffix, name, shown, problem):
    path = write(place / f"up{suffix}", {**task("t/"), name.replace("\x00", "@"): b"x"})
    if "\x00" in name:  # zipfile cuts a name at a NUL when it writes one: put it in the bytes afterwards
        path.write_bytes(path.read_bytes().replace(name.replace("\x00", "@").encode(), name.encode()))
    assert refused(path) == sentence(f"entry {shown} {problem}")


@pytest.mark.parametrize("suffix", [".tar", ".zip"])
def test_an_empty_name_is_refused(place, suffix):
    path = write(place / f"up{suffix}", {**task("t/"), "": b"x"})
    assert refused(path) == sentence("an entry has an empty name")


def test_a_name_that_is_not_utf8_is_refused(place):
    with tarfile.open(place / "up.tar", "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tf:
        for info, data in [member("t/task.toml", TOML), member("t/caf\xe9", b"x")]:
            tf.addfile(info, io.BytesIO(data or b""))
    assert refused(place / "up.tar") == sentence('entry "t/caf\\xe9" has a name that is not UTF-8')


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz", ".zip"])
def test_a_path_written_twice_is_refused(place, suffix):
    path = write(place / f"up{suffix}", task("t/"))
    if suffix == ".zip":
        write_zip(path, [(n, d, stat.S_IFREG | 0o644) for n, d in
                         [("t/task.toml", TOML), ("t/run.sh", b"a"), ("t/./run.sh", b"b")]])
    else:
        write_tar(path, [member("t/task.toml", TOML), member("t/run.sh", b"a"), member("t/./run.sh", b"b")])
    assert refused(path) == sentence('entry "t/./run.sh" appears twice (each path may appear once)')


@pytest.mark.parametrize(("suffix", "entries", "problem"), [
    (".tar", [("t/data", b"a file"), ("t/data/inner.txt", b"x")],
     'entry "t/data/inner.txt" is inside "t/data", which is a file'),
    (".zip", [("t/data/inner.txt", b"x"), ("t/data", b"a file")],
     'entry "t/data" is a file where an earlier entry has a folder'),
    (".tar.gz", [("t/data", b"a file"), ("t/data/", None)], 'entry "t/data" is a folder where an earlier entry has '
                                                            "a file"),
    (".zip", [("t/data/", None), ("t/./data/", None)], 'entry "t/./data/" appears twice (each path may appear '
                                                       "once)"),
])
def test_a_path_that_is_both_file_and_folder_is_refused(place, suffix, entries, problem):
    path = place / f"up{suffix}"
    if suffix == ".zip":
        write_zip(path, [("t/task.toml", TOML, stat.S_IFREG | 0o644)]
                  + [(n, d, (stat.S_IFDIR | 0o755) if d is None else (stat.S_IFREG | 0o644)) for n, d in entries])
    else:
        write_tar(path, [member("t/task.toml", TOML)] + [member(n, d) for n, d in entries])
    assert refused(path) == sentence(problem)


# --- limits --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_a_compression_bomb_stops_at_the_unpacked_limit(place, suffix, bytes_written):
    limits = Limits(unpacked_bytes=8 << 20)
    path = write(place / f"up{suffix}", {**task("t/"), "t/zeros": bytes(20 << 20)})
    assert path.stat().st_size < 1 << 20
    assert refused(path, limits) == sentence("it unpacks to more than 8 MB (the limit)")
    assert bytes_written[0] == 0  # the declared sizes alone refused it, before anything was written


def test_a_zip_that_declares_a_small_size_is_refused_as_corrupt(place, bytes_written):
    limits = Limits(unpacked_bytes=8 << 20)
    path = write(place / "up.zip", {**task("t/"), "t/zeros": bytes(20 << 20)})
    patch_zip(path, "t/zeros", file_size=1000)
    assert refused(path, limits) == sentence('it is corrupt or truncated at entry "t/zeros" (make the archive again)')
    assert bytes_written[0] <= limits.unpacked_bytes


def test_a_bomb_swapped_in_after_the_check_is_stopped_by_the_bytes_written(place, monkeypatch, bytes_written):
    """The bytes actually written are the limit, not what the first pass was told."""
    limits = Limits(unpacked_bytes=8 << 20)
    path = write(place / "up.tar.gz", task("t/"))
    bomb = write(place / "bomb.tar.gz", {**task("t/"), "t/zeros": bytes(20 << 20)}).read_bytes()
    (place / "bomb.tar.gz").unlink()
    real = tempfile.mkdtemp

    def swap_then_mkdtemp(*args, **kwargs):
        path.write_bytes(bomb)
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", swap_then_mkdtemp)
    assert refused(path, limits) == sentence("it unpacks to more than 8 MB (the limit)")
    assert 0 < bytes_written[0] <= limits.unpacked_bytes


def zeros_tar_gz(path: Path, n: int) -> Path:
    """A .tar.gz of one Task whose `zeros` file is n zero bytes: gzip members of 16 MB of zeros, concatenated
    (a valid gzip stream), so ~1 MB holds 1.1 GB and the test builds it in milliseconds."""
    zeros = tarfile.TarInfo("t/zeros")
    zeros.size = n
    prefix = (member("t/task.toml", TOML)[0].tobuf() + TOML + bytes(-len(TOML) % tarfile.BLOCKSIZE)
              + zeros.tobuf())
    chunk = gzip.compress(bytes(16 << 20), 6)
    body = n + (-n % tarfile.BLOCKSIZE) + 2 * tarfile.BLOCKSIZE
    with path.open("wb") as out:
        out.write(gzip.compress(prefix, 6))
        for _ in range(body // (16 << 20)):
            out.write(chunk)
        out.write(gzip.compress(bytes(body % (16 << 20)), 6))
    return path


def test_a_gigabyte_bomb_is_stopped_at_the_real_limit_without_filling_the_disk(place, bytes_written):
    path = zeros_tar_gz(place / "bomb.tar.gz", 1_100_000_000)
    assert path.stat().st_size < 2 << 20
    started = time.perf_counter()
    assert refused(path) == sentence("it unpacks to more than 1 GB (the limit)")
    assert bytes_written[0] <= LIMITS.unpacked_bytes
    assert time.perf_counter() - started < 30


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_the_unpacked_limit_is_exact(place, tmp_path, extra, accepted):
    """Exactly the limit unpacks, byte for byte; one byte more is refused (the same archive as the bomb)."""
    limits = Limits(unpacked_bytes=40 << 20)
    path = zeros_tar_gz(place / "big.tar.gz", limits.unpacked_bytes - len(TOML) + extra)
    if not accepted:
        assert refused(path, limits) == sentence("it unpacks to more than 40 MB (the limit)")
        return
    got = unpack(path, tmp_path / "uploads" / "bench", limits)
    assert (got.n_bytes, got.n_files, got.n_tasks) == (limits.unpacked_bytes, 2, 1)
    assert (got.root / "t" / "zeros").read_bytes() == bytes(limits.unpacked_bytes - len(TOML))


def test_a_huge_tar_extended_header_is_refused_before_it_is_read(place):
    info, data = member("t/task.toml", TOML)
    info.pax_headers = {"comment": "x" * (2 << 20)}
    path = write_tar(place / "up.tar.gz", [(info, data)])
    assert refused(path) == sentence("it holds a tar extended header of more than 1 MB, which no Task needs (make "
                                     "the archive again with plain tar)")


def test_a_zip_declaring_too_many_entries_is_refused_before_they_are_read(place):
    path = write(place / "up.zip", {**task("t/"), **{f"t/data/{i}.txt": b"x" for i in range(10)}})
    assert refused(path, Limits(files=5, folders=5)) == sentence(
        "it holds more than 11 entries, the most an upload may have")


def test_too_many_files_are_refused(place):
    path = write(place / "up.zip", {**task("t/"), "t/extra.txt": b"x"})
    assert refused(path, Limits(files=5)) == sentence("it holds more than 5 files (the limit)")


def test_too_many_folders_are_refused(place):
    path = write(place / "up.tar", {"t/task.toml": TOML, "t/a/b/c/d/e/deep.txt": b"x"})
    assert refused(path, Limits(folders=5)) == sentence("it makes more than 5 folders (the limit)")


def test_too_many_tasks_are_refused(place):
    files: dict[str, bytes | tuple[bytes, int]] = {}
    for i in range(4):
        files.update(task(f"bench/t{i}/"))
    path = write(place / "up.tar.gz", files)
    assert refused(path, Limits(tasks=3)) == sentence("it holds more than 3 Tasks (the limit)")


def test_an_oversize_archive_is_refused_before_it_is_read(place):
    path = write(place / "up.zip", {**task("t/"), "t/noise.bin": os.urandom(3000)})
    size = path.stat().st_size
    assert refused(path, Limits(compressed_bytes=2048)) == sentence(
        f"it is {size / 1024:.1f} KB, more than the 2 KB limit for one upload (split the Tasks into several "
        "archives)")


# --- corrupt, unknown, empty ---------------------------------------------------------------------------------------

CORRUPT = "it is corrupt or truncated (make the archive again)"


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_a_truncated_tar_is_refused(place, suffix):
    path = write(place / f"up{suffix}", {**task("t/"), "t/noise.bin": os.urandom(200_000), "t/z.txt": b"z"})
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    assert refused(path) == sentence('it is corrupt or truncated at entry "t/noise.bin" (make the archive again)')


def test_a_tar_with_garbage_after_its_members_is_refused(place):
    path = write(place / "up.tar", task("t/"))
    data = path.read_bytes().rstrip(b"\0")
    path.write_bytes(data + bytes(-len(data) % 512) + b"not a tar header".ljust(512, b"!") + bytes(1024))
    assert refused(path) == sentence('it is corrupt or truncated at entry "t/tests/test.sh" (make the archive '
                                     'again)')


def test_a_zip_without_its_central_directory_is_refused(place):
    path = write(place / "up.zip", task("t/"))
    path.write_bytes(path.read_bytes()[:200])
    assert refused(path) == sentence(CORRUPT)


def test_a_zip_entry_with_a_bad_checksum_is_refused(place):
    path = write_zip(place / "up.zip", [("t/task.toml", TOML, stat.S_IFREG | 0o644)])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("t/task.toml", TOML)
        zf.writestr("t/data.txt", b"the right bytes")
    data = path.read_bytes()
    path.write_bytes(data.replace(b"the right bytes", b"the wrong bytes"))
    assert refused(path) == sentence('it is corrupt or truncated at entry "t/data.txt" (make the archive again)')


@pytest.mark.parametrize(("name", "content"), [
    ("up.tar.bz2", None), ("up.zip", b"just some text, not a zip\n"),
    ("up.tar.gz", gzip.compress(b"plain text", mtime=0)),  # mtime 0: the same id on every xdist worker
    ("empty.tar", b""),
])
def test_an_unknown_format_is_refused(place, name, content):
    path = place / name
    if content is None:
        with tarfile.open(path, "w:bz2") as tf:
            tf.addfile(member("t/task.toml", TOML)[0], io.BytesIO(TOML))
    else:
        path.write_bytes(content)
    assert refused(path) == sentence(f"{name} is not a .tar.gz, .tar or .zip archive (pack the Task folders in one "
                                     "of those)")


@pytest.mark.parametrize("suffix", [".tar", ".zip"])
def test_an_archive_without_task_toml_is_refused(place, suffix):
    path = write(place / f"up{suffix}", {"docs/README.md": b"hello\n"})
    assert refused(path) == sentence("it holds no task.toml (each Task is a folder with a task.toml)")


def test_tasks_in_several_folders_are_refused(place):
    path = write(place / "up.tar", {**task("a/t1/"), **task("b/t2/")})
    assert refused(path) == sentence('its Tasks are in more than one folder ("a" and "b"); put every Task folder '
                                     "in one folder")


# --- the staging folder and the destination ------------------------------------------------------------------------

def test_an_interrupt_while_writing_leaves_nothing(place, tmp_path, monkeypatch):
    path = write(place / "up.tar.gz", task("t/"))
    calls = []

    def interrupted(fd: int, data: bytes | memoryview) -> int:
        calls.append(fd)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return len(data)

    monkeypatch.setattr(os, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        unpack(path, tmp_path / "uploads" / "bench")
    assert len(calls) == 2
    assert not any((tmp_path / "uploads").iterdir())


def test_an_existing_destination_is_refused_and_left_alone(place, tmp_path):
    path = write(place / "up.tar", task("t/"))
    dest = tmp_path / "uploads" / "bench"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep")
    with pytest.raises(AmberError, match=r"already exists: unpack the archive into a new folder\.$"):
        unpack(path, dest)
    assert snapshot(tmp_path / "uploads") == ["bench", "bench/mine.txt"]


def test_a_missing_archive_is_one_sentence(tmp_path):
    with pytest.raises(AmberError, match=r"^No archive at .*: give a \.tar\.gz, \.tar or \.zip file of Task "
                                         r"folders\.$"):
        unpack(tmp_path / "nothing.zip", tmp_path / "out")


# --- good archives -------------------------------------------------------------------------------------------------

LAYOUTS = {
    # name: (files, folders written as entries, root relative to dest, Task folders relative to root)
    "one Task folder": ({**task("my-task/")}, ("my-task", "my-task/tests"), "", ["my-task"]),
    "a folder of Tasks": ({**task("bench/t1/"), **task("bench/t2/"), "bench/README.md": b"two\n"},
                          ("bench",), "bench", ["t1", "t2"]),
    "Tasks at the root": ({**task("t1/"), **task("t2/"), **task("t3/")}, (), "", ["t1", "t2", "t3"]),
    "a single Task's files at the root": (task(), ("solution",), "", ["my upload"]),
}


@pytest.mark.parametrize("fmt", SUFFIX)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_unpacks_from_every_format(place, tmp_path, fmt, layout):
    files, folders, root, tasks = LAYOUTS[layout]
    path = write(place / f"my upload{SUFFIX[fmt]}", files, folders)
    dest = tmp_path / "uploads" / "bench"
    got = unpack(path, dest)
    assert got.root == dest / root if root else got.root == dest
    assert (got.n_files, got.n_tasks) == (len(files), len(tasks))
    assert got.n_bytes == sum(len(d[0] if isinstance(d, tuple) else d) for d in files.values())
    found = [d.name for d in find_task_dirs(got.root)]
    assert found == (["my-upload"] if layout.startswith("a single") else tasks)
    for d in find_task_dirs(got.root):
        assert (d / "task.toml").read_bytes() == TOML
        assert (d / "tests" / "test.sh").read_bytes() == SCRIPT
    assert [p.name for p in (tmp_path / "uploads").iterdir()] == ["bench"]  # no staging folder left


def test_a_tar_of_dot_unpacks(place, tmp_path):
    """`tar -C folder -czf up.tar.gz .` writes "./" and "./t1/task.toml"."""
    path = write_tar(place / "up.tar.gz", [member(".", None, 0o755), member("./t1", None, 0o755)]
                     + [member(f"./{n}", d if isinstance(d, bytes) else d[0]) for n, d in task("t1/").items()])
    got = unpack(path, tmp_path / "uploads" / "bench")
    assert (got.n_tasks, [d.name for d in find_task_dirs(got.root)]) == (1, ["t1"])


def test_a_task_toml_inside_a_task_is_one_of_its_files(place, tmp_path):
    path = write(place / "up.zip", {**task("t1/"), "t1/tests/fixture/task.toml": TOML})
    got = unpack(path, tmp_path / "uploads" / "bench")
    assert (got.n_tasks, got.root, got.n_files) == (1, tmp_path / "uploads" / "bench", 6)


@pytest.mark.parametrize("fmt", SUFFIX)
def test_only_the_executable_bit_is_kept(place, tmp_path, fmt):
    modes = {"t/setuid": 0o4755, "t/owner-x": 0o700, "t/group-x": 0o2710, "t/private": 0o600,
             "t/world": 0o666, "t/setuid-no-x": 0o4644}
    files: dict[str, bytes | tuple[bytes, int]] = {"t/task.toml": TOML, **{n: (b"x", m) for n, m in modes.items()}}
    started = time.time()
    got = unpack(write(place / f"up{SUFFIX[fmt]}", files, ("t", "t/empty")), tmp_path / "uploads" / "bench")
    mode = {n: stat.S_IMODE((got.root / n).stat().st_mode) for n in modes}
    assert mode == {"t/setuid": 0o755, "t/owner-x": 0o755, "t/group-x": 0o755, "t/private": 0o644,
                    "t/world": 0o644, "t/setuid-no-x": 0o644}
    for folder in (got.root, got.root / "t", got.root / "t" / "empty"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    st = (got.root / "t" / "setuid").stat()
    assert st.st_mtime >= started - 5  # the archive said 1980
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())


@pytest.mark.parametrize("fmt", SUFFIX)
def test_file_contents_are_kept_byte_for_byte(place, tmp_path, fmt):
    crlf = b"#!/bin/bash\r\necho hi\r\n\r\nlone\rcr and \x00 nul and \xff\xfe\r\n"
    noise = os.urandom(3 << 20)  # bigger than one chunk
    files: dict[str, bytes | tuple[bytes, int]] = {**task("t/"), "t/tests/test.sh": (crlf, 0o755),
                                                   "t/environment/noise.bin": noise, "t/empty": b""}
    got = unpack(write(place / f"up{SUFFIX[fmt]}", files), tmp_path / "uploads" / "bench")
    assert (got.root / "t" / "tests" / "test.sh").read_bytes() == crlf
    assert (got.root / "t" / "environment" / "noise.bin").read_bytes() == noise
    assert (got.root / "t" / "empty").read_bytes() == b""
    assert got.n_bytes == sum(len(d[0] if isinstance(d, tuple) else d) for d in files.values())


def test_a_zip_with_utf8_names_without_the_flag_keeps_them(place, tmp_path):
    path = place / "up.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("t/task.toml", TOML)
        zf.writestr("t/café.txt", b"ok")
    data = path.read_bytes()
    for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # clear the UTF-8 flag, as many tools write it
        at = data.find(sig)
        while at >= 0:
            (flags,) = struct.unpack_from("<H", data, at + off)
            data = data[:at + off] + struct.pack("<H", flags & ~0x800) + data[at + off + 2:]
            at = data.find(sig, at + 1)
    path.write_bytes(data)
    got = unpack(path, tmp_path / "uploads" / "bench")
    assert (got.root / "t" / "café.txt").read_bytes() == b"ok"

