"""How the service writes its result files: whole or not at all, one writer at a time, and one line when the
folder refuses them.

A result file (a perf JSON, env.json, summary.md, a plot, the JUnit XML through dyt.service.junit_atomic)
is written to a temporary file in its own folder and renamed over the old one (os.replace): a reader, a
second run or a crash mid-write sees the old file or the new one, never a mix or a truncated file. A file
that several runs read, change and write back (the perf JSON of one commit: the kernel bench's rows and
the model bench's) is changed under an exclusive lock (locked). A folder that cannot be written (full disk,
read-only, no permission) is one line naming the file and the errno (write_error), and the command that
measured something saves it elsewhere rather than drop it (rescue).

File-only: no torch, no Triton.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

# The exit status of a command whose results could not be written where asked (sysexits' EX_IOERR: a full
# disk, a read-only or unwritable reports/). Outside pytest's 0-5 and the gate's 0-3.
WRITE_FAILED = 74

_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for the file-size limit",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "the folder does not exist",
    errno.ENOTDIR: "a path component is not a folder",
    errno.EIO: "input/output error",
}


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """data into path whole or not at all: written to a temporary file beside it (same folder, so the
    rename stays on one file system), flushed to disk, then renamed over path. Parent folders are made.
    On any failure the temporary file is removed, path keeps what it held, and the OSError propagates."""
    target = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from the other users of a shared folder
        os.replace(tmp, target)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename != os.fspath(target.parent):
            raise named(exc, target) from exc  # named after the file asked for, not the temporary one
        raise
    return target


def named(exc: OSError, path: str | os.PathLike) -> OSError:
    """exc about path: the same errno and words, the file named the one asked for (not a temporary one)."""
    return type(exc)(exc.errno, exc.strerror, os.fspath(path)) if exc.errno else exc


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive lock for reading, changing and writing back path, shared by every process that uses
    this function on the same path (an flock on .<name>.lock beside it). Runs sharing a reports/ folder
    then add their rows one after the other instead of each writing back what it read before the other
    wrote. Where the lock file cannot be made (a read-only folder), the body runs unlocked: the write that
    follows fails with the folder's own error."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = open(target.parent / f".{target.name}.lock", "a+")  # noqa: SIM115 - held across the yield
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def reason(exc: OSError) -> str:
    """An OSError as a few words and its errno's name: 'read-only file system (EROFS)'."""
    name = errno.errorcode.get(exc.errno or 0)
    words = _REASONS.get(exc.errno or 0) or (exc.strerror or type(exc).__name__).lower()
    return f"{words} ({name})" if name else words


def write_error(command: str, path: str | os.PathLike, exc: OSError) -> str:
    """The one line a command prints when it cannot write path: '<command>: cannot write <path>: <reason>'.
    The path is the file's own where the error names one inside the folder asked for."""
    where = exc.filename if isinstance(exc.filename, str) and exc.filename else os.fspath(path)
    return f"{command}: cannot write {where}: {reason(exc)}"


def check_writable(folder: str | os.PathLike, probe_bytes: int = 64 * 1024) -> None:
    """Raises the OSError a write into folder meets now (made if missing): a probe file of probe_bytes is
    written, flushed and removed. For a run that would otherwise find out after hours of tests."""
    base, tmp = Path(folder), None
    try:
        base.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=base, prefix=".write-probe.", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(b"\0" * probe_bytes)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise named(exc, base) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def rescue(path: str | os.PathLike, data: str | bytes) -> Path | None:
    """Where path could not be written: data saved in the system's temporary folder instead
    ($TMPDIR, else /tmp), as dyt-rescued-<random>-<name>; its path, or None where that fails too."""
    name, tmp = Path(path).name, None
    try:
        fd, tmp = tempfile.mkstemp(prefix="dyt-rescued-", suffix=f"-{name}")
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return None
    return Path(tmp)


def unwritten(command: str, path: str | os.PathLike, exc: OSError, data: str | bytes, what: str) -> int:
    """A command's results that could not be written to path: saved elsewhere (rescue), one line on stderr
    naming the file, the reason and where `what` (e.g. '12 rows measured') went; returns WRITE_FAILED."""
    saved = rescue(path, data)
    where = f"are in {saved} instead" if saved else "are lost (the temporary folder refused them too)"
    print(f"{write_error(command, path, exc)}; {what} {where}", file=sys.stderr)
    return WRITE_FAILED
