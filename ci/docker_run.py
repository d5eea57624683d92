"""Build the CUDA image and run ci/entry.sh in it, through the docker Python SDK (`nox -s docker`).

    python ci/docker_run.py [--no-build] [--pull] [--image TAG] [--build-arg NAME=VALUE]... [--user UID:GID]
                            [--] [pytest args...]

The container is run exactly as the GPU workflow and the README run it: all GPUs (a device request of
count -1 with the "gpu" capability, i.e. `--gpus all`), the host IPC namespace (`--ipc=host`), reports/
mounted at /workspace/reports, and the same entry script (the image's ENTRYPOINT) with the same arguments
(none by default: the whole matrix, then the bench and the report). It runs as the owner of the reports
folder (`--user` changes that), so the entry script can write there whoever owns it. Logs stream as they
come; the exit code is the container's. Build options: `--build-arg` (e.g. BASE_IMAGE=<local image>, or
the base pinned by digest), `--pull` (pull the base first).

Failures say what happened and exit with their own code, leaving no container behind: no docker SDK (3),
no Docker engine (2), a failed build (4), no NVIDIA runtime or another start failure (5). SIGTERM or
Ctrl-C stops the container with a grace period (the entry script then writes the JUnit XML and the report
of what finished) and removes it.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMAGE = "dyt-kernels:latest"
ENTRYPOINT = "ci/entry.sh"
REPORTS_IN_CONTAINER = "/workspace/reports"
TRITON_CACHE_IN_CONTAINER = "/home/dyt/.triton/cache"
TRITON_CACHE_VOLUME = "dyt-triton-cache"
# The arguments the workflow gives the entry script: none (the whole matrix). Kept equal to the
# Dockerfile's CMD and to the workflow's `docker run` line by tests/test_ci_consistency.py.
DEFAULT_ARGS: tuple[str, ...] = ()
# Passed through to the container when set here (the workflow passes the same ones).
PASS_ENV = (
    "DYT_PYTEST_ARGS",
    "DYT_SKIP_BENCH",
    "DYT_GATE",
    "DYT_MARGIN",
    "DYT_MATRIX",
    "CUDA_VISIBLE_DEVICES",
)
# Seconds `docker stop` waits for the entry script to write its reports before it kills the container.
STOP_TIMEOUT = 60

EXIT_NO_ENGINE = 2
EXIT_NO_SDK = 3
EXIT_BUILD_FAILED = 4
EXIT_START_FAILED = 5


class EngineUnreachable(RuntimeError):
    """No Docker engine answered; the message says what was tried."""


class BuildFailed(RuntimeError):
    """docker build failed; the message holds the builder's error and the last lines of its log."""


class StartFailed(RuntimeError):
    """The container was created but could not start (no NVIDIA runtime, a bad mount, ...)."""


@dataclass
class Options:
    build: bool = True
    pull: bool = False
    image: str = IMAGE
    build_args: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    args: list[str] = field(default_factory=lambda: list(DEFAULT_ARGS))


def docker_run_line(image: str = IMAGE) -> str:
    """The one-line `docker run` that reproduces CI (README.md and docs/CONTAINER.md carry it verbatim)."""
    return f'docker run --gpus all --ipc=host -v "$PWD/reports:{REPORTS_IN_CONTAINER}" {image}'


def docker_host() -> str:
    """Where the SDK looks for the engine: $DOCKER_HOST, else the default local socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock (default; DOCKER_HOST is not set)"


def unreachable_message(exc: BaseException | str) -> str:
    return "\n".join(
        [
            "docker_run: no Docker engine is reachable, so the image can be neither built nor run.",
            f"  tried:       docker.from_env() and ping() at {docker_host()}",
            f"  DOCKER_HOST: {os.environ.get('DOCKER_HOST', '(not set)')}",
            f"  error:       {exc}",
            "  fix:         start the Docker engine (with the NVIDIA container toolkit for --gpus), or point",
            "               DOCKER_HOST at one (e.g. unix:///run/user/$UID/docker.sock for rootless Docker).",
            "               Without Docker, on a GPU box: ci/entry.sh (or nox -s gpu_tests).",
        ]
    )


def connect():
    """A docker client whose engine answered a ping, or EngineUnreachable."""
    import docker  # the docker SDK; `nox -s docker` installs it

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # DockerException, requests' ConnectionError, a bad DOCKER_HOST, ...
        raise EngineUnreachable(unreachable_message(exc)) from exc
    return client


def git_sha(root: pathlib.Path = ROOT) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def build(
    client,
    image: str = IMAGE,
    root: pathlib.Path = ROOT,
    build_args: dict[str, str] | None = None,
    pull: bool = False,
    network_mode: str | None = None,
    out=sys.stdout,
) -> None:
    """docker build -t IMAGE --build-arg GIT_SHA=<HEAD> [--build-arg ...] [--pull] ROOT, streaming the log.

    Raises BuildFailed with the builder's error and the last lines of the log."""
    args = {"GIT_SHA": git_sha(root), **(build_args or {})}
    shown = " ".join(f"--build-arg {k}={v}" for k, v in args.items())
    print(
        f"docker_run: docker build -t {image} {shown}{' --pull' if pull else ''} {root}", file=out, flush=True
    )
    tail: list[str] = []
    try:
        chunks = client.api.build(
            path=str(root),
            tag=image,
            buildargs=args,
            pull=pull,
            rm=True,
            forcerm=True,
            decode=True,
            network_mode=network_mode,
        )
        for chunk in chunks:
            if "stream" in chunk:
                out.write(chunk["stream"])
                out.flush()
                tail = (tail + chunk["stream"].splitlines())[-20:]
            elif "error" in chunk:
                raise BuildFailed(build_failed_message(image, chunk["error"], tail))
    except BuildFailed:
        raise
    except Exception as exc:  # APIError (bad Dockerfile, missing base), a dropped connection, ...
        raise BuildFailed(build_failed_message(image, str(exc), tail)) from exc


def build_failed_message(image: str, error: str, tail: Sequence[str]) -> str:
    lines = [f"docker_run: building {image} failed: {error.strip()}"]
    if tail:
        lines += ["  last lines of the build log:", *(f"    {line}" for line in tail)]
    lines.append(
        "  fix: see the failing step above; a missing base image takes --pull or --build-arg BASE_IMAGE=..."
    )
    return "\n".join(lines)


def reports_owner(reports: pathlib.Path) -> str | None:
    """uid:gid of the reports folder: the container writes there as its owner."""
    try:
        st = reports.stat()
    except OSError:
        return None
    return f"{st.st_uid}:{st.st_gid}"


def run_kwargs(
    args: Sequence[str], reports: pathlib.Path, image: str = IMAGE, user: str | None = None
) -> dict:
    """The containers.create() arguments: the SDK's spelling of the workflow's docker run line."""
    import docker

    kwargs: dict = {
        "image": image,
        "command": list(args),
        "name": f"dyt-kernels-{os.getpid()}",
        "device_requests": [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])],
        "ipc_mode": "host",
        "stop_signal": "SIGTERM",
        "volumes": {
            str(reports.resolve()): {"bind": REPORTS_IN_CONTAINER, "mode": "rw"},
            TRITON_CACHE_VOLUME: {"bind": TRITON_CACHE_IN_CONTAINER, "mode": "rw"},
        },
        "environment": {name: os.environ[name] for name in PASS_ENV if name in os.environ},
    }
    user = user or reports_owner(reports)
    if user:
        kwargs["user"] = user
    return kwargs


def start_failed_message(exc: BaseException) -> str:
    text = str(exc)
    lines = [f"docker_run: the container could not start: {text}"]
    if "device driver" in text or "nvidia" in text.lower() or "gpu" in text.lower():
        lines += [
            "  the engine has no NVIDIA runtime for --gpus all: install the NVIDIA container toolkit",
            "  (nvidia-ctk runtime configure --runtime=docker, then restart the engine) on a GPU machine.",
        ]
    return "\n".join(lines)


def stream(chunks: Iterable[bytes], out=sys.stdout) -> None:
    buffer = getattr(out, "buffer", None)
    for chunk in chunks:
        if buffer is not None:
            buffer.write(chunk)
            buffer.flush()
        else:
            out.write(chunk.decode(errors="replace"))
            out.flush()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run(
    client, args: Sequence[str], reports: pathlib.Path, image: str = IMAGE, user: str | None = None
) -> int:
    """Run the entry script in a fresh container, stream its logs, return its exit code; never leaves the
    container behind (created, running or exited)."""
    reports.mkdir(parents=True, exist_ok=True)
    kwargs = run_kwargs(args, reports, image, user)
    print(f"docker_run: {docker_run_line(image)} {' '.join(args)}".rstrip(), flush=True)
    print(
        f"docker_run: container {kwargs['name']}, user {kwargs.get('user', '(the image default)')}",
        flush=True,
    )
    container = client.containers.create(**kwargs)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        try:
            container.start()
        except Exception as exc:  # APIError: no NVIDIA runtime ("could not select device driver"), ...
            raise StartFailed(start_failed_message(exc)) from exc
        try:
            stream(container.logs(stream=True, follow=True))
            status = container.wait()
        except KeyboardInterrupt as exc:
            print(
                f"docker_run: {exc or 'interrupted'}: stopping the container (up to {STOP_TIMEOUT} s)",
                file=sys.stderr,
                flush=True,
            )
            container.stop(timeout=STOP_TIMEOUT)
            status = container.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            container.remove(force=True)
        except Exception as exc:  # the run's exit code matters more than a leftover container
            print(f"docker_run: could not remove container {container.id[:12]}: {exc}", file=sys.stderr)
    code = int(status.get("StatusCode", 1))
    error = status.get("Error")
    if error:
        print(f"docker_run: container error: {error}", file=sys.stderr)
    print(f"docker_run: container exited {code}; reports in {reports}", flush=True)
    return code


def parse(argv: Sequence[str]) -> Options:
    """Own options first, then an optional --, then the entry script's args."""
    argv = list(argv)
    opts = Options()

    def value(flag: str) -> str:
        word = argv.pop(0)
        if "=" in word and word.startswith(f"{flag}="):
            return word.split("=", 1)[1]
        if not argv:
            raise SystemExit(f"docker_run: {flag} needs a value")
        return argv.pop(0)

    while argv:
        word = argv[0]
        if word == "--no-build":
            opts.build = False
            argv.pop(0)
        elif word == "--pull":
            opts.pull = True
            argv.pop(0)
        elif word == "--image" or word.startswith("--image="):
            opts.image = value("--image")
        elif word == "--user" or word.startswith("--user="):
            opts.user = value("--user")
        elif word == "--build-arg" or word.startswith("--build-arg="):
            name, sep, val = value("--build-arg").partition("=")
            if not sep:
                raise SystemExit(f"docker_run: --build-arg {name}: expected NAME=VALUE")
            opts.build_args[name] = val
        elif word == "--":
            argv.pop(0)
            break
        else:
            break
    opts.args = argv or list(DEFAULT_ARGS)
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse(sys.argv[1:] if argv is None else argv)
    try:
        import docker  # noqa: F401
    except ImportError:
        print(
            "docker_run: the docker Python SDK is not installed (pip install docker; nox -s docker does it)",
            file=sys.stderr,
        )
        return EXIT_NO_SDK
    try:
        client = connect()
    except EngineUnreachable as exc:
        print(exc, file=sys.stderr)
        return EXIT_NO_ENGINE
    reports = pathlib.Path(os.environ.get("DYT_REPORTS", ROOT / "reports"))
    try:
        if opts.build:
            build(client, opts.image, build_args=opts.build_args, pull=opts.pull)
        return run(client, opts.args, reports, opts.image, opts.user)
    except BuildFailed as exc:
        print(exc, file=sys.stderr)
        return EXIT_BUILD_FAILED
    except StartFailed as exc:
        print(exc, file=sys.stderr)
        return EXIT_START_FAILED


if __name__ == "__main__":
    sys.exit(main())
