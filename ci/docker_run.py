"""Build the CUDA image and run ci/entry.sh in it, through the docker Python SDK (`nox -s docker`).

    python ci/docker_run.py [--no-build] [--image TAG] [--] [pytest args...]

The container is run exactly as the GPU workflow and the README run it: all GPUs (a device request of
count -1 with the "gpu" capability, i.e. `--gpus all`), the host IPC namespace (`--ipc=host`), reports/
mounted at /workspace/reports, and the same entry script (the image's ENTRYPOINT) with the same arguments
(none by default: the whole matrix, then the bench and the report). Logs stream as they come; the exit
code is the container's. With no Docker engine reachable it says what it tried and exits 2.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterable, Sequence

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
PASS_ENV = ("DYT_PYTEST_ARGS", "DYT_SKIP_BENCH", "DYT_GATE", "DYT_MARGIN", "CUDA_VISIBLE_DEVICES")

EXIT_NO_ENGINE = 2
EXIT_NO_SDK = 3


class EngineUnreachable(RuntimeError):
    """No Docker engine answered; the message says what was tried."""


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
        client = docker.from_env()
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


def build(client, image: str = IMAGE, root: pathlib.Path = ROOT, out=sys.stdout) -> None:
    """docker build -t IMAGE --build-arg GIT_SHA=<HEAD> ROOT, streaming the build log."""
    import docker

    print(f"docker_run: building {image} from {root}/Dockerfile", file=out, flush=True)
    for chunk in client.api.build(
        path=str(root), tag=image, buildargs={"GIT_SHA": git_sha(root)}, rm=True, decode=True
    ):
        if "stream" in chunk:
            out.write(chunk["stream"])
            out.flush()
        elif "error" in chunk:
            raise docker.errors.BuildError(chunk["error"], build_log=[chunk])


def run_kwargs(args: Sequence[str], reports: pathlib.Path, image: str = IMAGE) -> dict:
    """The containers.run() arguments: the SDK's spelling of the workflow's docker run line."""
    import docker

    kwargs: dict = {
        "image": image,
        "command": list(args),
        "detach": True,
        "device_requests": [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])],
        "ipc_mode": "host",
        "volumes": {
            str(reports.resolve()): {"bind": REPORTS_IN_CONTAINER, "mode": "rw"},
            TRITON_CACHE_VOLUME: {"bind": TRITON_CACHE_IN_CONTAINER, "mode": "rw"},
        },
        "environment": {name: os.environ[name] for name in PASS_ENV if name in os.environ},
    }
    if hasattr(os, "getuid") and os.getuid() != 0:
        # Write reports/ as the caller, whatever uid the image's user has.
        kwargs["user"] = f"{os.getuid()}:{os.getgid()}"
    return kwargs


def stream(chunks: Iterable[bytes], out=sys.stdout) -> None:
    buffer = getattr(out, "buffer", None)
    for chunk in chunks:
        if buffer is not None:
            buffer.write(chunk)
            buffer.flush()
        else:
            out.write(chunk.decode(errors="replace"))
            out.flush()


def run(client, args: Sequence[str], reports: pathlib.Path, image: str = IMAGE) -> int:
    """Run the entry script in a fresh container, stream its logs, return its exit code."""
    reports.mkdir(parents=True, exist_ok=True)
    kwargs = run_kwargs(args, reports, image)
    print(f"docker_run: {docker_run_line(image)} {' '.join(args)}".rstrip(), flush=True)
    container = client.containers.run(**kwargs)
    try:
        stream(container.logs(stream=True, follow=True))
        status = container.wait()
    except KeyboardInterrupt:
        print("docker_run: interrupted, stopping the container", file=sys.stderr, flush=True)
        container.stop(timeout=10)
        status = container.wait()
    finally:
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


def parse(argv: Sequence[str]) -> tuple[bool, str, list[str]]:
    """Own options first (--no-build, --image TAG), then an optional --, then the entry script's args."""
    argv = list(argv)
    do_build, image = True, IMAGE
    while argv:
        if argv[0] == "--no-build":
            do_build = False
            argv.pop(0)
        elif argv[0] == "--image" and len(argv) > 1:
            image = argv[1]
            del argv[:2]
        elif argv[0].startswith("--image="):
            image = argv.pop(0).split("=", 1)[1]
        elif argv[0] == "--":
            argv.pop(0)
            break
        else:
            break
    return do_build, image, argv or list(DEFAULT_ARGS)


def main(argv: Sequence[str] | None = None) -> int:
    do_build, image, args = parse(sys.argv[1:] if argv is None else argv)
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
    if do_build:
        build(client, image)
    return run(client, args, reports, image)


if __name__ == "__main__":
    sys.exit(main())
