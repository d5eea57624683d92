"""The container check (`nox -s container_check`, run by .ci/run): builds the image's CPU variant from the
same Dockerfile and runs it, on a machine with no GPU and no image registry.

    python ci/container_check.py [--base IMAGE] [--keep]

As root on Linux, it
  1. installs Debian's docker.io and debootstrap when they are missing (apt-get),
  2. starts its own dockerd (--iptables=false --bridge=none, its own --data-root, --exec-root and socket
     in a temporary folder; builds and runs use the host network) and stops it at the end,
  3. builds a base image from Debian packages with debootstrap (Debian 12, Python 3.11), carrying the
     machine's CA certificates; or takes --base IMAGE (e.g. debian:bookworm-slim@sha256:<digest>, pulled)
     where a registry is reachable,
  4. puts the CPU torch wheel that ci/requirements-cpu-image.txt locks into .wheels/ (`pip download`,
     which reads pip's own configuration: a local wheel folder, or --extra-index-url of the PyTorch CPU
     index through $DYT_TORCH_INDEX),
  5. builds the Dockerfile with BASE_IMAGE=<that base>, LOCK=ci/requirements-cpu-image.txt (the docker SDK),
and checks the image:
  - a rebuild for another GIT_SHA takes apt and the toolchain from the cache,
  - container-structure-test (ci/container-structure-test.yaml): user, entry point, env, imports,
  - the entry point without a GPU: exit 2 and its message,
  - the tooling tests inside the image (`-m tooling` through the entry point, DYT_MATRIX=interpreter),
  - a run as another uid with an empty reports mount, one with no mount, and an unwritable mount (exit 2),
  - `docker stop` in the middle of a run: the JUnit XML of what finished and the summary are written.
Each check prints one `container-check:` line with its result and time; the JUnit XML of the structure
test and the logs go to reports/container-check/. Exit 0 when all pass, 1 when one fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))

import docker_run  # noqa: E402  (ci/docker_run.py: the build the GPU image uses too)

LOCK = "ci/requirements-cpu-image.txt"
CST_CONFIG = ROOT / "ci" / "container-structure-test.yaml"
WHEELS = ROOT / ".wheels"
OUT = ROOT / "reports" / "container-check"
DEBIAN_SUITE = "bookworm"


def debian_mirror() -> str:
    """The Debian archive debootstrap fetches from: DYT_DEBIAN_MIRROR, else the one this machine's apt is
    set up with (the first `URIs:`/`deb` entry of /etc/apt/sources.list(.d) that serves the main suite)."""
    chosen = os.environ.get("DYT_DEBIAN_MIRROR", "").strip()
    if chosen:
        return chosen
    sources = [
        pathlib.Path("/etc/apt/sources.list"),
        *sorted(pathlib.Path("/etc/apt/sources.list.d").glob("*")),
    ]
    for path in sources:
        if not path.is_file() or path.suffix not in ("", ".list", ".sources"):
            continue
        text = path.read_text(errors="replace")
        for uri in re.findall(r"^URIs:\s*(\S+)", text, re.M) + re.findall(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M
        ):
            if uri.rstrip("/").endswith("/debian"):
                return uri
    raise SystemExit(
        "container-check: no Debian archive in this machine's apt sources; set DYT_DEBIAN_MIRROR"
    )


TAG = f"dyt-kernels:cpu-check-{os.getpid()}"
BASE_TAG = f"dyt-base:{DEBIAN_SUITE}-{os.getpid()}"
NO_GPU_MESSAGE = "no CUDA GPU is visible"
UNWRITABLE_MESSAGE = "cannot write to /workspace/reports"
OTHER_UID = "4242:4242"

failures: list[str] = []


def log(message: str) -> None:
    print(f"container-check: {message}", flush=True)


@contextlib.contextmanager
def check(name: str):
    """One named check: prints `ok` or `FAILED` with its time; a failure is recorded and the run goes on."""
    start = time.monotonic()
    log(f"{name} ...")
    try:
        yield
    except Exception as exc:  # an AssertionError, a docker error, a time-out: all are this check's failure
        failures.append(name)
        log(f"{name}: FAILED ({time.monotonic() - start:.0f} s): {exc}")
    else:
        log(f"{name}: ok ({time.monotonic() - start:.0f} s)")


def sh(*cmd: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=True, **kwargs)


def ensure_tools() -> None:
    wanted = (("dockerd", "docker.io"), ("debootstrap", "debootstrap"))
    missing = [pkg for tool, pkg in wanted if not shutil.which(tool)]
    if not pathlib.Path("/usr/share/keyrings/debian-archive-keyring.gpg").exists():
        missing.append("debian-archive-keyring")  # debootstrap checks Debian's signatures with it
    if missing:
        log(f"installing Debian's {' '.join(missing)} (apt-get)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        sh("apt-get", "update", "-qq", env=env, stdout=subprocess.DEVNULL)
        sh(
            "apt-get",
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            *missing,
            env=env,
            stdout=subprocess.DEVNULL,
        )


class Dockerd:
    """A dockerd of this check's own: own data root, exec root and socket; no iptables, no bridge."""

    def __init__(self, work: pathlib.Path):
        self.work = work
        self.socket = work / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.logfile = OUT / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    def start(self):
        cmd = [
            "dockerd",
            "--iptables=false",
            "--bridge=none",
            f"--data-root={self.work / 'data'}",
            f"--exec-root={self.work / 'exec'}",
            f"--host={self.host}",
            f"--pidfile={self.work / 'docker.pid'}",
        ]
        log(f"starting {' '.join(cmd)}")
        self.proc = subprocess.Popen(cmd, stdout=self.logfile.open("wb"), stderr=subprocess.STDOUT)
        import docker

        deadline = time.monotonic() + 60
        while True:
            try:
                client = docker.DockerClient(base_url=self.host, timeout=900)
                client.ping()
                version = client.version()
                log(f"dockerd {version.get('Version')} answers at {self.host}")
                return client
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"dockerd did not start; see {self.logfile}") from None
                time.sleep(0.5)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        log(f"dockerd stopped (exit {self.proc.returncode})")


def debootstrap_base(client, work: pathlib.Path) -> str:
    """A Debian base image from Debian's packages, imported into the engine as BASE_TAG."""
    rootfs = work / "rootfs"
    cmd = [
        "debootstrap",
        "--variant=minbase",
        "--include=ca-certificates",
        DEBIAN_SUITE,
        str(rootfs),
        debian_mirror(),
    ]
    with (OUT / "debootstrap.log").open("wb") as out:
        sh(*cmd, stdout=out, stderr=subprocess.STDOUT)
    # The machine's own CA certificates (a TLS-inspecting proxy's among them), so that pip in the build
    # trusts what pip on the host trusts; the image's apt keeps them in its bundle.
    local_cas = sorted(pathlib.Path("/usr/local/share/ca-certificates").glob("*.crt"))
    for ca in local_cas:
        shutil.copy2(ca, rootfs / "usr/local/share/ca-certificates" / ca.name)
    if local_cas:
        with (OUT / "debootstrap.log").open("ab") as out:
            sh("chroot", str(rootfs), "update-ca-certificates", stdout=out, stderr=subprocess.STDOUT)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (rootfs / junk).glob("*"):
            if path.is_file():
                path.unlink()
    tarball = work / "rootfs.tar"
    sh("tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), ".")
    repository, tag = BASE_TAG.split(":")
    client.api.import_image_from_file(
        str(tarball),
        repository=repository,
        tag=tag,
        changes=[
            "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
            "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
            'CMD ["/bin/bash"]',
        ],
    )
    shutil.rmtree(rootfs)
    tarball.unlink()
    return BASE_TAG


def locked_torch() -> str:
    match = re.search(r"^torch==(\S+)", (ROOT / LOCK).read_text(), re.M)
    assert match, f"{LOCK} pins no torch"
    return match.group(1)


def fetch_torch_wheel() -> pathlib.Path:
    """The CPU torch wheel of the lock, in .wheels/ (the Dockerfile's WHEELS), through pip's configuration."""
    version = locked_torch()
    existing = sorted(WHEELS.glob(f"torch-{version}-*.whl"))
    if existing:
        return existing[0]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        "--platform",
        "manylinux_2_28_x86_64",
        "--dest",
        str(WHEELS),
        f"torch=={version}",
    ]
    if os.environ.get("DYT_TORCH_INDEX"):
        cmd[4:4] = ["--extra-index-url", os.environ["DYT_TORCH_INDEX"]]
    sh(*cmd)
    (wheel,) = WHEELS.glob(f"torch-{version}-*.whl")
    return wheel


def build_image(client, base: str) -> None:
    with (OUT / "build.log").open("w") as out:
        try:
            docker_run.build(
                client, TAG, ROOT, build_args={"BASE_IMAGE": base, "LOCK": LOCK}, network_mode="host", out=out
            )
        except docker_run.BuildFailed as exc:
            raise AssertionError(f"{exc}\n(whole log: {OUT / 'build.log'})") from None
    steps = re.findall(r"^Step \d+/\d+ : (.*)$", (OUT / "build.log").read_text(), re.M)
    log(f"built {TAG}: {len(steps)} Dockerfile steps; log in {OUT / 'build.log'}")


def check_rebuild_for_a_new_commit(client, base: str) -> None:
    """Another GIT_SHA rebuilds only the layers after ARG GIT_SHA: apt and the toolchain come from cache."""
    start = time.monotonic()
    args = {"BASE_IMAGE": base, "LOCK": LOCK, "GIT_SHA": "0" * 40}
    with (OUT / "rebuild.log").open("w") as out:
        docker_run.build(client, f"{TAG}-rebuild", ROOT, build_args=args, network_mode="host", out=out)
    took = time.monotonic() - start
    steps = re.split(r"^Step \d+/\d+ : ", (OUT / "rebuild.log").read_text(), flags=re.M)[1:]
    cached = [s.splitlines()[0] for s in steps if " ---> Using cache" in s]
    rebuilt = [
        s.splitlines()[0] for s in steps if " ---> Using cache" not in s and not s.startswith(("ARG", "FROM"))
    ]
    assert any(s.startswith("RUN apt-get update") for s in cached), "the apt layer was rebuilt"
    assert any(s.startswith("RUN python3 -m venv") for s in cached), "the toolchain layer was rebuilt"
    metadata = ("ENV DYT_GIT_SHA", "LABEL", "USER", "VOLUME", "STOPSIGNAL", "ENTRYPOINT", "CMD")
    assert rebuilt and all(s.startswith(metadata) for s in rebuilt), f"rebuilt for a new GIT_SHA: {rebuilt}"
    client.images.remove(f"{TAG}-rebuild", force=True)
    log(
        f"a new GIT_SHA rebuilds {len(rebuilt)} metadata steps in {took:.0f} s; "
        "apt and the toolchain come from cache"
    )


def structure_test(host: str) -> None:
    report = OUT / "structure-test.xml"
    cst = shutil.which("container-structure-test")
    assert cst, "container-structure-test is not installed (pip install container-structure-test)"
    proc = subprocess.run(
        [
            cst,
            "test",
            "--driver",
            "docker",
            "--image",
            TAG,
            "--config",
            str(CST_CONFIG),
            "--output",
            "junit",
            "--test-report",
            str(report),
        ],
        env={**os.environ, "DOCKER_HOST": host},
        capture_output=True,
        text=True,
    )
    (OUT / "structure-test.log").write_text(proc.stdout + proc.stderr)
    suite = ET.parse(report).getroot()
    cases = suite.findall(".//testcase")
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert cases, f"no test ran; see {OUT / 'structure-test.log'}"
    assert proc.returncode == 0 and not failed, f"failed: {failed}; see {OUT / 'structure-test.log'}"
    log(f"container-structure-test: {len(cases)} passed ({', '.join(c.get('name') for c in cases)})")


def run_container(
    client,
    *args: str,
    reports: pathlib.Path | None = None,
    user: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900,
) -> tuple[int, str]:
    volumes = {str(reports): {"bind": "/workspace/reports", "mode": "rw"}} if reports else {}
    container = client.containers.create(
        TAG,
        list(args),
        user=user,
        environment=env or {},
        volumes=volumes,
        network_mode="host",
        name=f"dyt-check-{os.getpid()}-{time.monotonic_ns()}",
    )
    try:
        container.start()
        code = container.wait(timeout=timeout)["StatusCode"]
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True, v=True)


def fresh_dir(work: pathlib.Path, name: str, owner: tuple[int, int] | None, mode: int) -> pathlib.Path:
    path = work / name
    path.mkdir()
    if owner:
        os.chown(path, *owner)
    path.chmod(mode)
    return path


def junit_counts(path: pathlib.Path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}


def check_no_gpu(client) -> None:
    code, logs = run_container(client)
    assert code == 2, f"exit {code}, expected 2:\n{logs[-2000:]}"
    assert NO_GPU_MESSAGE in logs, f"no '{NO_GPU_MESSAGE}' in:\n{logs[-2000:]}"
    log(f"no GPU: exit 2, '{next(ln for ln in logs.splitlines() if NO_GPU_MESSAGE in ln).strip()[:100]}...'")


def check_tooling(client, work: pathlib.Path) -> None:
    reports = fresh_dir(work, "reports-tooling", (1000, 1000), 0o755)
    code, logs = run_container(
        client, "-m", "tooling", reports=reports, env={"DYT_MATRIX": "interpreter", "DYT_CPU_WORKERS": "2"}
    )
    (OUT / "tooling.log").write_text(logs)
    counts = junit_counts(reports / "junit" / "tests.xml")
    assert code == 0, f"exit {code}; {counts}; see {OUT / 'tooling.log'}"
    assert counts["tests"] > 0 and counts["failures"] == counts["errors"] == 0, counts
    assert (reports / "summary.md").is_file(), "no summary.md"
    log(f"pytest -m tooling in the image: {counts['tests']} tests, {counts['skipped']} skipped, 0 failed")


def check_other_uid(client, work: pathlib.Path) -> None:
    uid, gid = (int(x) for x in OTHER_UID.split(":"))
    selection = ("-m", "tooling", "-k", "test_entry_exit_code_is_the_matrix")
    env = {"DYT_MATRIX": "interpreter", "DYT_CPU_WORKERS": "1"}
    reports = fresh_dir(work, "reports-uid", (uid, gid), 0o755)
    code, logs = run_container(client, *selection, reports=reports, user=OTHER_UID, env=env)
    assert code == 0, f"empty mount owned by {OTHER_UID}: exit {code}:\n{logs[-2000:]}"
    written = sorted(p.relative_to(reports).as_posix() for p in reports.rglob("*") if p.is_file())
    assert "junit/tests.xml" in written and "summary.md" in written, written
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in reports.rglob("*")}
    assert owners == {(uid, gid)}, f"files owned by {owners}, not {OTHER_UID}"
    log(f"--user {OTHER_UID}, empty reports mount: exit 0, wrote {', '.join(written)}")

    code, logs = run_container(client, *selection, user=OTHER_UID, env=env)
    assert code == 0, f"--user {OTHER_UID} without a mount: exit {code}:\n{logs[-2000:]}"
    log(f"--user {OTHER_UID}, no mount (the image's reports/, mode 1777): exit 0")

    locked = fresh_dir(work, "reports-root", None, 0o755)
    code, logs = run_container(client, reports=locked, user=OTHER_UID, env=env)
    assert code == 2 and UNWRITABLE_MESSAGE in logs, f"unwritable mount: exit {code}:\n{logs[-2000:]}"
    log(f"--user {OTHER_UID}, a root-owned 0755 mount: exit 2, '{UNWRITABLE_MESSAGE} as uid {uid}...'")


def check_stop(client, work: pathlib.Path) -> None:
    reports = fresh_dir(work, "reports-stop", (1000, 1000), 0o755)
    container = client.containers.create(
        TAG,
        ["-m", "reference_equivalence"],
        environment={"DYT_MATRIX": "interpreter", "DYT_CPU_WORKERS": "2"},
        volumes={str(reports): {"bind": "/workspace/reports", "mode": "rw"}},
        network_mode="host",
        name=f"dyt-check-stop-{os.getpid()}",
    )
    try:
        container.start()
        deadline = time.monotonic() + 300
        while not re.search(r"\[\s*\d+%\]", container.logs().decode(errors="replace")):
            assert time.monotonic() < deadline, "no test finished within 300 s"
            container.reload()
            assert container.status == "running", f"exited before a test finished: {container.status}"
            time.sleep(1)
        time.sleep(5)
        start = time.monotonic()
        container.stop(timeout=60)
        stopped_in = time.monotonic() - start
        code = container.wait(timeout=120)["StatusCode"]
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True, v=True)
    (OUT / "stop.log").write_text(logs)
    assert code not in (0, 137), f"exit {code} after docker stop (137: killed, the trap did not run)"
    assert "stopped by SIGTERM" in logs, f"the entry script did not see the SIGTERM; see {OUT / 'stop.log'}"
    counts = junit_counts(reports / "junit" / "tests.xml")
    assert counts["tests"] > 0, counts
    assert (reports / "summary.md").is_file(), "no summary.md after docker stop"
    log(
        f"docker stop mid-run: exit {code} after {stopped_in:.1f} s (no SIGKILL), junit/tests.xml with "
        f"{counts['tests']} tests, summary.md written"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="a base image to pull instead of the debootstrap one")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (docker data root)")
    opts = parser.parse_args(argv)
    if sys.platform != "linux" or os.geteuid() != 0:
        log("needs root on Linux (it starts its own dockerd and runs debootstrap)")
        return 2
    started = time.monotonic()
    OUT.mkdir(parents=True, exist_ok=True)
    ensure_tools()
    work = pathlib.Path(tempfile.mkdtemp(prefix="dytcc.", dir="/var/tmp"))
    work.chmod(0o755)
    daemon = Dockerd(work)
    try:
        client = daemon.start()
        with check("base image"):
            if opts.base:
                client.images.pull(opts.base)
                base = opts.base
            else:
                base = debootstrap_base(client, work)
            log(f"base image {base}")
        if failures:
            return 1
        with check("CPU torch wheel in .wheels/"):
            log(f"wheel {fetch_torch_wheel().name}")
        with check(f"build the Dockerfile's CPU variant (BASE_IMAGE={base}, LOCK={LOCK})"):
            build_image(client, base)
        if failures:
            return 1
        with check("rebuild for a new commit"):
            check_rebuild_for_a_new_commit(client, base)
        with check("container-structure-test"):
            structure_test(daemon.host)
        with check("entry point without a GPU"):
            check_no_gpu(client)
        with check("tooling tests inside the image"):
            check_tooling(client, work)
        with check("another uid, empty and absent reports mounts"):
            check_other_uid(client, work)
        with check("docker stop mid-run"):
            check_stop(client, work)
        for image in (TAG, base):
            with contextlib.suppress(Exception):
                client.images.remove(image, force=True)
    finally:
        daemon.stop()
        if opts.keep:
            log(f"kept {work}")
        else:
            mounts = [line.split()[1] for line in pathlib.Path("/proc/mounts").read_text().splitlines()]
            for mount in sorted((m for m in mounts if m.startswith(f"{work}/")), reverse=True):
                subprocess.run(["umount", "-l", mount], capture_output=True)
            shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - started
    if failures:
        log(f"{len(failures)} failed: {', '.join(failures)} ({took:.0f} s)")
        return 1
    log(f"all checks passed ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
