"""Archive entries: a tar, a gzipped tar or a zip read as one stream of entries, whatever the format.

The rules of an upload (`archive`) are the same for every format, but the
formats are not read alike: a tar is read forward only (a gzip stream cannot
seek back cheaply) with its long-name headers capped, a zip's central
directory is counted before zipfile builds an object per entry, and each
names its links, devices and encrypted or unreadable entries its own way.
This module hides all of that behind one `Entry` per member, so the rules
never ask which format they read. The format itself comes from the file's
first bytes, never its name.
"""

from __future__ import annotations

import contextlib
import gzip
import lzma
import os
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, Protocol

from amber_pipeline.benchmarks.intake.archive_refusals import refused, shown_size

CHUNK = 1 << 20  # bytes read and written at a time: a member is never held whole in memory
MAX_HEADER = 1 << 20  # a tar's pax or GNU long-name header is read into memory whole, so it is capped
ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
# What a malformed archive makes the standard library's readers raise (gzip.BadGzipFile is an OSError).
READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, OSError, ValueError,
               struct.error, RecursionError, NotImplementedError)
ONLY = " (only files and folders are allowed)"

Format = Literal["tar", "tar.gz", "zip"]


@dataclass(frozen=True)
class Entry:
    """One tar member or zip entry, in the one shape the rules read."""

    name: str  # as written in the archive
    kind: str  # "file", "folder", or why the entry is refused ("is a symbolic link ...")
    size: int  # as declared: a bound checked before writing, never trusted while writing
    executable: bool
    open: Callable[[], IO[bytes]]


# --- format -------------------------------------------------------------------------------------------------------

def detect_format(archive: Path) -> Format:
    """The archive's format from its first bytes; anything else is refused."""
    with archive.open("rb") as f:
        head = f.read(tarfile.BLOCKSIZE)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(archive, "rb") as g:
                first = g.read(tarfile.BLOCKSIZE)
        except READ_ERRORS:
            raise refused("it is corrupt or truncated (make the archive again)") from None
        if _is_tar_block(first):
            return "tar.gz"
    elif _is_tar_block(head):
        return "tar"
    raise refused(f"{archive.name} is not a .tar.gz, .tar or .zip archive (pack the Task folders in one of those)")


def _is_tar_block(block: bytes) -> bool:
    """Whether a first block is a tar header (its checksum holds) or the zeros of an empty tar."""
    if len(block) != tarfile.BLOCKSIZE:
        return False
    if block == bytes(tarfile.BLOCKSIZE):
        return True
    try:
        tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


# --- entries: one shape for tar members and zip entries -----------------------------------------------------------

def entries(archive: Path, fmt: Format, most: int) -> Generator[Entry]:
    """The archive's entries in order; a zip with more than `most` entries is refused before any is read."""
    if fmt == "zip":
        return _zip_entries(archive, most)
    return _tar_entries(archive, fmt == "tar.gz")


def _tar_entries(archive: Path, compressed: bool) -> Generator[Entry]:
    with archive.open("rb") as raw:
        stream = _Forward(gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw, seekable=not compressed)
        tf = tarfile.TarFile(fileobj=stream, mode="r", tarinfo=_CappedTarInfo,  # type: ignore[arg-type]
                             encoding="utf-8", errors="surrogateescape")
        while (member := tf.next()) is not None:
            # tarfile keeps every member it has read; we need none of them, and there may be 100,000
            tf.members.clear()  # type: ignore[attr-defined]
            yield Entry(member.name, _tar_kind(member), member.size, bool(member.mode & 0o111),
                        _opener(tf, member))
        if stream.last.strip(b"\0"):
            raise tarfile.ReadError("a header that is not a tar header")
        if stream.read(CHUNK) and stream.read(1):  # past the end: read to the end so gzip checks its CRC
            raise tarfile.ReadError("data after the end of the tar")


def _opener(tf: tarfile.TarFile, member: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def open_member() -> IO[bytes]:
        f = tf.extractfile(member)
        if f is None:
            raise tarfile.ReadError("not a file")
        return f
    return open_member


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.size < 0:
        raise tarfile.ReadError("a negative size")
    if member.isreg():
        return "file"
    if member.isdir():
        return "folder"
    if member.issym():
        return "is a symbolic link" + ONLY
    if member.islnk():
        return "is a hard link" + ONLY
    if member.ischr():
        return "is a character device" + ONLY
    if member.isblk():
        return "is a block device" + ONLY
    if member.isfifo():
        return "is a FIFO (named pipe)" + ONLY
    return "is a special file" + ONLY


class _CappedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses a pax or GNU long-name header too big to read into memory."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        meta = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                tarfile.SOLARIS_XHDTYPE)
        if self.type in meta and self.size > MAX_HEADER:
            raise refused(f"it holds a tar extended header of more than {shown_size(MAX_HEADER)}, "
                          "which no Task needs (make the archive again with plain tar)")
        return tarfile.TarInfo._proc_member(self, tarfile_)  # type: ignore[attr-defined,no-any-return]


class _Source(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...
    def seek(self, pos: int, whence: int = os.SEEK_SET, /) -> int: ...


class _Forward:
    """The decompressed tar as tarfile reads it, forward only: a gzip stream skips by reading (in big chunks,
    not gzip's 8 KB seeks), and the last block read tells a clean end of the tar from a bad header."""

    def __init__(self, raw: _Source, seekable: bool) -> None:
        self._raw, self._seekable, self._pos = raw, seekable, 0
        self.last = b""

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._pos += len(data)
        self.last = data
        return data

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        if whence != os.SEEK_SET or pos < self._pos:
            raise ValueError(f"a forward-only tar stream cannot seek back to {pos} from {self._pos}")
        if self._seekable:
            self._pos = self._raw.seek(pos)
            return self._pos
        while self._pos < pos:
            skipped = len(self._raw.read(min(CHUNK, pos - self._pos)))
            if not skipped:
                break
            self._pos += skipped
        return self._pos


def _zip_entries(archive: Path, most: int) -> Generator[Entry]:
    with archive.open("rb") as raw:
        if _zip_entry_count(raw, most) > most:
            # zipfile builds one ZipInfo per entry of the central directory before we see any of them
            raise refused(f"it holds more than {most:,} entries, the most an upload may have")
        raw.seek(0)
        with zipfile.ZipFile(raw) as zf:
            for info in zf.infolist():
                yield Entry(_zip_name(info), _zip_kind(info), info.file_size,
                            bool((info.external_attr >> 16) & 0o111), _zip_opener(zf, info))


def _zip_opener(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], IO[bytes]]:
    return lambda: zf.open(info)


def _zip_name(info: zipfile.ZipInfo) -> str:
    """The entry's name as written (zipfile cuts it at a NUL; the original keeps it). Many tools write UTF-8
    names without setting the UTF-8 flag, which zipfile then reads as cp437."""
    name = info.orig_filename
    if not info.flag_bits & 0x800:
        with contextlib.suppress(UnicodeError):
            return name.encode("cp437").decode("utf-8")
    return name


def _zip_kind(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if info.flag_bits & 0x1:
        return "is encrypted (upload it without a password)"
    if kind == stat.S_IFLNK:
        return "is a symbolic link" + ONLY
    if kind == stat.S_IFCHR:
        return "is a character device" + ONLY
    if kind == stat.S_IFBLK:
        return "is a block device" + ONLY
    if kind == stat.S_IFIFO:
        return "is a FIFO (named pipe)" + ONLY
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return "is a special file" + ONLY
    if info.is_dir() or kind == stat.S_IFDIR:
        return "folder"
    if info.compress_type not in ZIP_METHODS:
        return "uses a compression method that cannot be read (make the zip with deflate)"
    return "file"


def _zip_entry_count(f: IO[bytes], most: int) -> int:
    """The central directory's entries, counted by walking it as zipfile will (stopping once past `most`).
    A central directory that is not where and how big the end record says is refused as corrupt."""
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - 22 - 0xFFFF))
    tail = f.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise zipfile.BadZipFile("no end of central directory record")
    size, offset = struct.unpack("<II", tail[at + 12:at + 20])
    if at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":  # Zip64: the real figures are in its own record
        (zip64_at,) = struct.unpack("<Q", tail[at - 12:at - 4])
        f.seek(zip64_at)
        record = f.read(56)
        if len(record) != 56 or record[:4] != b"PK\x06\x06":
            raise zipfile.BadZipFile("no Zip64 end of central directory record")
        size, offset = struct.unpack("<QQ", record[40:56])
    f.seek(offset)
    count = walked = 0
    while walked < size and count <= most:
        head = f.read(46)
        if len(head) != 46 or head[:4] != b"PK\x01\x02":
            raise zipfile.BadZipFile("the central directory is not where the end record says")
        name, extra, comment = struct.unpack("<HHH", head[28:34])
        f.seek(name + extra + comment, os.SEEK_CUR)
        walked += 46 + name + extra + comment
        count += 1
    return count
