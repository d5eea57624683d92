"""What the benchmarks (dyt.service.bench, model_bench, fp8_bench) share while they run: stopping early
with the rows measured so far (stops: SIGTERM and a time limit), one line for a failure, the progress bar.

A stop is BenchStopped, raised by SIGTERM (stop_on_signal; `timeout` running out) or by a time limit; a
benchmark that stops writes what it measured and exits with STOPPED, which ci/entry.sh reads.

Exit status of `python -m dyt bench` (every suite), each but 0 with one line on stderr saying why:
  0   measured and written (and, with --compare, no regression)
  1   --compare: a dyt row or ratio regressed (the gate's lines)
  2   nothing measured: bad arguments, or no CUDA device for a CUDA run
  3   STOPPED: SIGTERM, Ctrl-C or --time-limit; the rows finished are written, marked incomplete
      (with --compare, the gate's 3 also means the GPU models differ or no rows match under --strict)
  74  files.WRITE_FAILED: the perf JSON could not be written (full disk, read-only or unwritable folder);
      the old file is left whole and the rows measured are saved in the temporary folder the line names
"""

from __future__ import annotations

import contextlib
import signal

STOPPED = 3  # the exit status of a bench stopped early (its rows so far written, no gate)


class BenchStopped(BaseException):
    """Raised by SIGTERM in the measuring loop. A BaseException, so that no row's `except Exception` (which
    turns a failing provider into a row) swallows it."""


def stop_on_signal(signum, frame):
    """A signal handler: the signal as a BenchStopped named after it."""
    raise BenchStopped(signal.Signals(signum).name)


def _stop_on_time_limit(signum, frame):
    raise BenchStopped("time limit")


@contextlib.contextmanager
def stops(time_limit: float | None = None):
    """Inside: SIGTERM, and with time_limit (seconds) the time running out, raise BenchStopped in the
    measuring loop; on leaving, the timer is off and the previous handlers are back."""
    handlers = {signal.SIGTERM: signal.signal(signal.SIGTERM, stop_on_signal)}
    if time_limit:
        handlers[signal.SIGALRM] = signal.signal(signal.SIGALRM, _stop_on_time_limit)
        signal.setitimer(signal.ITIMER_REAL, float(time_limit))
    try:
        yield
    finally:
        if time_limit:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, previous in handlers.items():
            signal.signal(sig, previous)


def error_text(exc: BaseException) -> str:
    """A failure as one line of at most 300 characters, for a row's "error" field."""
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:300]


class _NoBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


def progress(total: int):
    """A tqdm bar of total ticks, or one that shows nothing where tqdm is not installed."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc="bench", unit="row", dynamic_ncols=True)
