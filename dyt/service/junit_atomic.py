"""A pytest plugin: the JUnit XML (--junitxml) written whole or not at all. `python -m dyt.service.gpu_matrix`
loads it (`-p dyt.service.junit_atomic`); any pytest run may.

pytest writes the JUnit XML straight into its file at the end of the session: a full disk, a second
SIGTERM or a SIGKILL in the middle of that write leaves a truncated file in place of the previous one. With
this plugin pytest writes a temporary file beside it (.<name>.<pid>.tmp), which is renamed over the file
once written (os.replace):
- a write that fails (full disk, read-only folder) removes the temporary file, leaves the earlier file as
  it was, writes the XML into the system's temporary folder instead (dyt-rescued-<random>-<name>), prints
  one line (`junit: cannot write <path>: <reason> (<errno>); this run's JUnit XML is in <rescued> instead`)
  and makes the run's exit status files.WRITE_FAILED (74) instead of a traceback; the other end-of-session
  hooks still run;
- a run whose file was written by another run while it ran (two runs of one session sharing a reports/
  folder) keeps both: its own goes beside as <name>-<pid>.xml, which one line names. A run after an
  earlier one replaces its file as before.
Only the process that writes the JUnit XML (not an xdist worker) does anything.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time

import pytest

from dyt.service.files import WRITE_FAILED, locked, named, write_error

_STATE = pytest.StashKey[dict]()


@pytest.hookimpl(trylast=True)  # after junitxml's pytest_configure has made its writer
def pytest_configure(config):
    from _pytest.junitxml import xml_key  # the key junitxml stashes its writer under (pytest >= 7)

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    final = xml.logfile
    folder, name = os.path.split(final)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    state = {"final": final, "tmp": tmp, "started": time.time(), "error": None, "rescued": None}
    config.stash[_STATE] = state
    write = xml.pytest_sessionfinish

    def pytest_sessionfinish():  # LogXML's own hook, around its write
        try:
            write()
        except OSError as exc:
            state["error"] = named(exc, final)
            with contextlib.suppress(OSError):
                os.unlink(state["tmp"])
            state["rescued"] = _rescue(xml, write, name)
            return
        try:
            _place(state)
        except OSError as exc:
            state["error"] = exc

    xml.logfile = state["tmp"]
    config.pluginmanager.unregister(xml)
    xml.pytest_sessionfinish = pytest_sessionfinish
    config.pluginmanager.register(xml)


def _rescue(xml, write, name: str) -> str | None:
    """The JUnit XML written again, into the system's temporary folder: its path, or None where that
    fails too."""
    fd, path = tempfile.mkstemp(prefix="dyt-rescued-", suffix=f"-{name}")
    os.close(fd)
    xml.logfile = path
    try:
        write()
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return path


def _place(state: dict) -> None:
    """The written temporary file renamed to the JUnit file, or beside it where another run wrote that
    file after this run started."""
    final, tmp = state["final"], state["tmp"]
    with locked(final):
        try:
            theirs = os.stat(final).st_mtime >= state["started"]
        except FileNotFoundError:
            theirs = False
        target = final
        if theirs:
            stem, ext = os.path.splitext(final)
            target = f"{stem}-{os.getpid()}{ext}"
            print(f"junit: {final} was written by another run during this one; this run's JUnit XML is "
                  f"{target}", file=sys.stderr)  # fmt: skip
        os.replace(tmp, target)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    state = session.config.stash.get(_STATE, None)
    if state is None or state["error"] is None:
        return
    with contextlib.suppress(OSError):
        os.unlink(state["tmp"])
    where = (f"this run's JUnit XML is in {state['rescued']} instead" if state["rescued"] else
             "this run's JUnit XML is lost (the temporary folder refused it too)")  # fmt: skip
    print(f"\n{write_error('junit', state['final'], state['error'])}; {where}; an earlier file there is "
          "left as it was", file=sys.stderr)  # fmt: skip
    session.exitstatus = WRITE_FAILED
