"""The support bundle as a file: write it atomically, read its facts back.

A bundle is a ``.zip`` or a ``.tar.gz`` (``.tgz``) with every member under one top folder,
so unpacking it never scatters files into the user's directory. Writing goes to a
temporary file in the same directory, then a rename: a crash, a full disk or Ctrl-C never
leaves half an archive under the name the user asked for, and the rename is atomic on
POSIX (https://pubs.opengroup.org/onlinepubs/9699919799/functions/rename.html). Without
``force`` the temporary file is published with ``link()``, which fails when the name
exists, so a file that appeared while the doctor ran (a run takes minutes) is not
overwritten either.

Formats: zip (https://pkware.cachefly.net/webdocs/casestudies/APPNOTE.TXT, via
``zipfile``) and gzip-compressed POSIX tar (``tarfile``), both readable with the tools a
support engineer has everywhere (``unzip``, ``tar xzf``, Windows Explorer for zip).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import shutil
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ddp_doctor.files import is_special_file

TOP = "ddp-doctor-bundle"
FACTS_MEMBER = f"{TOP}/facts.json"
MAX_MEMBER_READ = 64 << 20  # a facts snapshot is kilobytes; refuse to inflate a bomb


class BundleError(Exception):
    """The bundle cannot be written; the message is one line for the user."""


class BundleReadError(Exception):
    """A bundle (or .gz) given as facts cannot be read; one line for the user."""


@dataclass(frozen=True)
class Member:
    """One file of the bundle: its name under the top folder, bytes, and what it is."""

    name: str
    data: bytes
    about: str


def archive_kind(path: Path) -> str | None:
    """``zip`` or ``tar.gz`` from the name the user gave, else None."""
    name = path.name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    return None


def _write_zip(handle: io.BufferedWriter, members: list[Member], now: float) -> None:
    stamp = time.localtime(now)[:6]
    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member in members:
            info = zipfile.ZipInfo(f"{TOP}/{member.name}", date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16  # rw-r--r-- when unpacked by Info-ZIP
            archive.writestr(info, member.data)


def _write_tar(handle: io.BufferedWriter, members: list[Member], now: float) -> None:
    with tarfile.open(fileobj=handle, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for member in members:
            info = tarfile.TarInfo(f"{TOP}/{member.name}")
            info.size, info.mtime, info.mode = len(member.data), int(now), 0o644
            archive.addfile(info, io.BytesIO(member.data))


def _publish(tmp: Path, path: Path, force: bool) -> None:
    """Give the finished temporary file its real name, refusing to overwrite without force.
    A device or FIFO (``--bundle /dev/null``) is written into, never replaced."""
    if is_special_file(path):
        with open(tmp, "rb") as source, open(path, "wb") as target:
            shutil.copyfileobj(source, target)
        return
    if force:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)  # fails with EEXIST instead of replacing
    except FileExistsError:
        raise BundleError(f"--bundle {path}: already exists (add --force to overwrite it)"
                          ) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK,
                             errno.EXDEV, errno.ENOSYS):
            raise
        # A file system without hard links (FAT, some FUSE mounts): check, then rename.
        if path.exists():
            raise BundleError(f"--bundle {path}: already exists (add --force to overwrite "
                              f"it)") from None
        os.replace(tmp, path)


def write_archive(path: Path, members: list[Member], force: bool = False) -> None:
    """Write MEMBERS as the archive PATH (kind from its suffix), all or nothing.

    The file is created readable by its owner only (``mkstemp``): a bundle describes the
    machine and its environment, so sharing it is the user's decision.
    """
    kind = archive_kind(path)
    if kind is None:
        raise BundleError(f"--bundle {path}: name a .zip or .tar.gz file")
    if path.exists() and not force:
        raise BundleError(f"--bundle {path}: already exists (add --force to overwrite it)")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise BundleError(f"--bundle {path}: cannot write in {parent}: "
                          f"{exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            writer = _write_zip if kind == "zip" else _write_tar
            writer(handle, members, time.time())
            handle.flush()
            os.fsync(handle.fileno())
        _publish(tmp, path, force)
    except OSError as exc:
        raise BundleError(f"--bundle {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):  # gone already once published
            tmp.unlink()


def read_bundle_facts(path: Path, raw: bytes | None = None) -> bytes:
    """The bytes of ``ddp-doctor-bundle/facts.json`` in a bundle (or of a gzipped snapshot).

    RAW is the file's bytes when the caller has read them already (``ddp_doctor.inputs``
    reads each file once); PATH then only names it in messages.
    """
    def source() -> io.BytesIO | Path:
        return io.BytesIO(raw) if raw is not None else path

    try:
        if zipfile.is_zipfile(source()):
            return _zip_facts(path, source())
        with (io.BytesIO(raw) if raw is not None else path.open("rb")) as handle:
            try:
                with tarfile.open(fileobj=handle, mode="r:gz") as archive:
                    return _tar_facts(path, archive)
            except tarfile.ReadError:
                pass
        with gzip.open(source(), "rb") as plain:  # `gzip facts.json`: a snapshot, compressed
            data = plain.read(MAX_MEMBER_READ + 1)
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise BundleReadError(f"cannot read the bundle {path}: {exc}") from None
    if len(data) > MAX_MEMBER_READ:
        raise BundleReadError(f"{path}: the compressed facts are larger than "
                              f"{MAX_MEMBER_READ >> 20} MiB")
    return data


def _missing(path: Path) -> BundleReadError:
    return BundleReadError(f"{path}: this archive has no {FACTS_MEMBER} (a bundle written by "
                           f"`ddp-doctor smoke` has no facts; use one from `check` or "
                           f"`doctor`)")


def _zip_facts(path: Path, source: io.BytesIO | Path) -> bytes:
    with zipfile.ZipFile(source) as archive:
        try:
            info = archive.getinfo(FACTS_MEMBER)
        except KeyError:
            raise _missing(path) from None
        if info.file_size > MAX_MEMBER_READ:
            raise BundleReadError(f"{path}: {FACTS_MEMBER} is larger than "
                                  f"{MAX_MEMBER_READ >> 20} MiB")
        return archive.read(info)


def _tar_facts(path: Path, archive: tarfile.TarFile) -> bytes:
    for member in archive:
        if member.name != FACTS_MEMBER or not member.isfile():
            continue
        if member.size > MAX_MEMBER_READ:
            raise BundleReadError(f"{path}: {FACTS_MEMBER} is larger than "
                                  f"{MAX_MEMBER_READ >> 20} MiB")
        handle = archive.extractfile(member)
        if handle is not None:
            return handle.read()
    raise _missing(path)
