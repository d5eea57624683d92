"""What the kernel benchmark (dyt.service.bench) and the model benchmark (dyt.service.model_bench) share
while they run: stopping early with the rows measured so far, one line for a failure, the progress bar.

A stop is BenchStopped, raised by SIGTERM (stop_on_signal; `timeout` running out) or by a time limit; a
benchmark that stops writes what it measured and exits with STOPPED, which ci/entry.sh reads.
"""

from __future__ import annotations

import signal

STOPPED = 3  # the exit status of a bench stopped early (its rows so far written, no gate)


class BenchStopped(BaseException):
    """Raised by SIGTERM in the measuring loop. A BaseException, so that no row's `except Exception` (which
    turns a failing provider into a row) swallows it."""


def stop_on_signal(signum, frame):
    """A signal handler: the signal as a BenchStopped named after it."""
    raise BenchStopped(signal.Signals(signum).name)


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
