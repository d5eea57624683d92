"""The GPU workflow, the Dockerfile, `nox -s docker`, the README and docs/CONTAINER.md call the same entry
script with the same arguments, and the CI plumbing keeps its hardening. Plain text and regex only: no
YAML library is a dependency of the project.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENTRY = ROOT / "ci" / "entry.sh"
DOCKERFILE = ROOT / "Dockerfile"
GPU_WORKFLOW = ROOT / ".github" / "workflows" / "gpu.yml"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
README = ROOT / "README.md"
CONTAINER_DOC = ROOT / "docs" / "CONTAINER.md"
DOCKER_RUN_PY = ROOT / "ci" / "docker_run.py"

# docker run options that take a value as the next word.
_VALUE_OPTIONS = {"-v", "--volume", "-e", "--env", "--env-file", "--user", "-u", "--gpus", "--ipc"}
_VALUE_OPTIONS |= {
    "--entrypoint",
    "--name",
    "-w",
    "--workdir",
    "--mount",
    "--shm-size",
    "--network",
    "--stop-timeout",
}


def _load_docker_run():
    spec = importlib.util.spec_from_file_location("ci_docker_run", DOCKER_RUN_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


docker_run = _load_docker_run()


def parse_docker_run(line: str) -> tuple[list[tuple[str, str | None]], str, list[str]]:
    """`docker run [options] IMAGE [args]` -> (options as (name, value) pairs, image, args)."""
    words = shlex.split(line)
    assert words[:2] == ["docker", "run"], line
    options: list[tuple[str, str | None]] = []
    i = 2
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        if "=" in word and word.startswith("--"):
            name, value = word.split("=", 1)
            options.append((name, value))
        elif word in _VALUE_OPTIONS:
            options.append((word, words[i + 1]))
            i += 1
        else:
            options.append((word, None))
        i += 1
    assert i < len(words), f"no image in {line!r}"
    return options, words[i], words[i + 1 :]


def docker_run_lines(text: str) -> list[str]:
    """Every one-line `docker run ...` command in a Markdown or YAML text (prompts and indents stripped)."""
    lines = []
    for raw in text.splitlines():
        line = raw.strip().lstrip("$ ").strip("`").strip()
        if line.startswith("docker run "):
            lines.append(line)
    return lines


def dockerfile_exec_form(instruction: str) -> list[str]:
    match = re.search(rf"^{instruction}\s+(\[.*\])\s*$", DOCKERFILE.read_text(), re.M)
    assert match, f"the Dockerfile has no exec-form {instruction} [...]"
    return json.loads(match.group(1))


def canonical() -> tuple[list[tuple[str, str | None]], str, list[str]]:
    return parse_docker_run(docker_run.docker_run_line())


def assert_same_invocation(line: str, where: str, *, args: list[str] | None = None) -> None:
    """line runs the same image with the canonical GPU, IPC and reports options (extras allowed)."""
    want_options, want_image, _ = canonical()
    options, image, got_args = parse_docker_run(line)
    assert image == want_image, f"{where}: runs image {image!r}, not {want_image!r}: {line}"
    for option in want_options:
        assert option in options, f"{where}: {option} missing from {line}"
    if args is not None:
        assert got_args == args, f"{where}: entry script args {got_args} differ from {args}: {line}"


def test_canonical_run_line_is_the_documented_one():
    assert docker_run.docker_run_line() == (
        'docker run --gpus all --ipc=host -v "$PWD/reports:/workspace/reports" dyt-kernels:latest'
    )
    assert docker_run.REPORTS_IN_CONTAINER == "/workspace/reports"
    assert docker_run.ENTRYPOINT == "ci/entry.sh"


def test_entry_script_is_executable_and_robust():
    assert ENTRY.is_file()
    mode = ENTRY.stat().st_mode
    assert mode & stat.S_IXUSR, "ci/entry.sh is not executable (chmod +x, and git keeps mode 100755)"
    text = ENTRY.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert re.search(r"^set -E?euo pipefail$", text, re.M)
    # The documented reports path: $DYT_REPORTS, else <repo>/reports.
    assert 'REPORTS="${DYT_REPORTS:-$ROOT/reports}"' in text
    assert "-m dyt.service.gpu_matrix" in text
    assert "-m dyt bench" in text and "--compare" in text and "--margin" in text
    assert "-m dyt report --reports" in text
    assert "GITHUB_STEP_SUMMARY" in text


def test_git_records_entry_script_as_executable():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-s", "ci/entry.sh"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout
    if not out.strip():
        pytest.skip("ci/entry.sh is not committed yet")
    assert out.split()[0] == "100755", out


def test_dockerfile_runs_the_entry_script_with_the_default_args():
    entrypoint = dockerfile_exec_form("ENTRYPOINT")
    assert len(entrypoint) == 1 and entrypoint[0].endswith(docker_run.ENTRYPOINT), entrypoint
    assert dockerfile_exec_form("CMD") == list(docker_run.DEFAULT_ARGS)
    text = DOCKERFILE.read_text()
    workdir = re.findall(r"^WORKDIR\s+(\S+)", text, re.M)
    assert workdir and entrypoint[0] == f"{workdir[-1]}/{docker_run.ENTRYPOINT}"
    assert f"DYT_REPORTS={docker_run.REPORTS_IN_CONTAINER}" in text
    assert re.search(r"^USER\s+(?!0\b|root\b)\S+", text, re.M), "the image must not run as root"
    assert "TRITON_CACHE_DIR=" in text


def test_gpu_workflow_runs_the_image_like_the_readme():
    """The same options and arguments as the README's line; the image is this run's own tag, built from
    the Dockerfile one step before (a unique tag per run attempt: runners sharing an engine never race)."""
    text = GPU_WORKFLOW.read_text()
    runs = docker_run_lines(text)
    assert len(runs) == 1, f"expected one docker run line in the GPU workflow, found {runs}"
    want_options, want_image, _ = canonical()
    options, image, args = parse_docker_run(runs[0])
    assert image == "${IMAGE}" and args == list(docker_run.DEFAULT_ARGS), runs[0]
    for option in want_options:
        assert option in options, f"gpu.yml: {option} missing from {runs[0]}"
    tag = re.search(r"^      IMAGE: (.+)$", text, re.M)
    assert tag and tag.group(1).startswith(want_image.split(":")[0] + ":"), "gpu.yml: no IMAGE of dyt-kernels"
    assert "${{ github.run_id }}-${{ github.run_attempt }}" in tag.group(1), tag.group(1)
    assert re.search(r'docker build .*--tag "\$\{IMAGE\}" \.$', text, re.M), "gpu.yml does not build ${IMAGE}"
    assert ("--name", "${CONTAINER}") in options, "gpu.yml: the container has no name to stop it by"


def test_docker_session_runs_the_image_like_the_workflow():
    noxfile = (ROOT / "noxfile.py").read_text()
    body = noxfile[noxfile.index("def docker(") : noxfile.index("def resolve(")]
    assert '"--require-hashes", "-r", str(CHECK_LOCK)' in body
    assert '"ci/docker_run.py", *session.posargs' in body
    assert docker_run.parse([]) == docker_run.Options()
    assert docker_run.Options().args == list(docker_run.DEFAULT_ARGS) and docker_run.Options().build
    opts = docker_run.parse(["--no-build", "--", "-k", "x"])
    assert (opts.build, opts.image, opts.args) == (False, docker_run.IMAGE, ["-k", "x"])
    assert docker_run.parse(["-m", "grid_limit"]).args == ["-m", "grid_limit"]
    opts = docker_run.parse(["--pull", "--build-arg", "BASE_IMAGE=local:1", "--build-arg=LOCK=x.txt",
                             "--user", "4242:4242", "--image=t:1", "-k", "y"])  # fmt: skip
    assert opts.pull and opts.build_args == {"BASE_IMAGE": "local:1", "LOCK": "x.txt"}
    assert (opts.user, opts.image, opts.args) == ("4242:4242", "t:1", ["-k", "y"])
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        docker_run.parse(["--build-arg", "BASE_IMAGE"])


@pytest.mark.parametrize("doc", [README, CONTAINER_DOC], ids=["README.md", "docs/CONTAINER.md"])
def test_docs_carry_the_run_line(doc):
    # No skip: a README without the line is a failure, so the docs cannot drift from CI.
    assert doc.is_file(), f"{doc.relative_to(ROOT)} is missing"
    text = doc.read_text()
    line = docker_run.docker_run_line()
    assert line in text, f"{doc.relative_to(ROOT)} lacks the run line:\n    {line}"
    for run in docker_run_lines(text):
        if canonical()[1] in run:
            assert_same_invocation(run, str(doc.relative_to(ROOT)))


def test_container_doc_shows_how_to_rerun_one_test():
    text = CONTAINER_DOC.read_text()
    assert re.search(r"dyt-kernels:latest -k ", text)
    assert "--entrypoint python" in text and "-m dyt.service.gpu_matrix" in text


def test_workflows_exist_and_never_use_pull_request_target():
    names = {p.name for p in WORKFLOWS}
    assert {"gpu.yml", "cpu.yml"} <= names, names
    for path in WORKFLOWS:
        code = re.sub(r"(^|\s)#.*$", "", path.read_text(), flags=re.M)  # comments may name it
        assert "pull_request_target" not in code, path.name
        assert "workflow_run" not in code, path.name


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_hardening(path):
    text = path.read_text()
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)", text, re.M)
    assert uses, f"{path.name} uses no action"
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), f"{path.name}: {ref} is not pinned by SHA"
    checkouts = len(re.findall(r"uses:\s*actions/checkout@", text))
    assert text.count("persist-credentials: false") == checkouts, f"{path.name}: checkout keeps credentials"
    assert re.search(r"^permissions: \{\}\n", text, re.M), f"{path.name}: top permissions grant something"
    jobs = re.findall(r"^  ([\w-]+):\n", text[text.index("\njobs:") :], re.M)
    assert len(re.findall(r"^    timeout-minutes:", text, re.M)) == len(jobs), f"{path.name}: timeouts"
    reusable = re.search(r"^on:\n  workflow_call:", text, re.M)  # its callers set concurrency
    assert reusable or "cancel-in-progress: ${{ github.event_name == 'pull_request' }}" in text, path.name
    for match in re.finditer(r"^\s+run:.*\$\{\{", text, re.M):
        pytest.fail(f"{path.name}: expression expanded inside a run script: {match.group(0)}")


def test_gpu_workflow_gates_untrusted_code():
    text = GPU_WORKFLOW.read_text()
    assert "self-hosted" in text and "gpu" in text
    assert "contains(github.event.pull_request.labels.*.name, 'run-gpu')" in text
    assert "github.event.pull_request.head.repo.full_name == github.repository" in text
    assert "environment: gpu-runner" in text
    assert re.search(r"^  push:\n    branches: \[main\]", text, re.M)
    # Only the publishing job may write checks; the GPU job reads.
    gpu_job = text[text.index("  gpu-tests:") : text.index("  publish:")]
    assert not re.search(r"^\s+\w[\w-]*: write\b", gpu_job, re.M), "the GPU job has a write permission"
    assert "if: ${{ !cancelled() }}" in gpu_job and "upload-artifact@" in gpu_job


def _run_docker_run(env_extra: dict[str, str], prelude: str = "") -> subprocess.CompletedProcess:
    code = (
        f"{prelude}import runpy, sys; sys.argv = ['ci/docker_run.py']; "
        f"runpy.run_path({str(DOCKER_RUN_PY)!r}, run_name='__main__')"
    )
    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_docker_run_without_engine_fails_clearly(tmp_path):
    pytest.importorskip("docker", reason="the docker SDK is not installed (nox -s docker installs it)")
    host = f"unix://{tmp_path}/no-such-docker.sock"
    proc = _run_docker_run({"DOCKER_HOST": host})
    assert proc.returncode == docker_run.EXIT_NO_ENGINE, proc.stdout + proc.stderr
    assert "no Docker engine is reachable" in proc.stderr
    assert host in proc.stderr and "DOCKER_HOST" in proc.stderr


def test_docker_run_without_sdk_fails_clearly():
    proc = _run_docker_run({}, prelude="import sys; sys.modules['docker'] = None; ")
    assert proc.returncode == docker_run.EXIT_NO_SDK, proc.stdout + proc.stderr
    assert "pip install docker" in proc.stderr


def test_docker_run_requests_all_gpus_host_ipc_and_the_reports_mount(tmp_path):
    pytest.importorskip("docker", reason="the docker SDK is not installed (nox -s docker installs it)")
    kwargs = docker_run.run_kwargs(["-k", "x"], tmp_path)
    (request,) = kwargs["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert kwargs["ipc_mode"] == "host"
    assert kwargs["volumes"][str(tmp_path.resolve())] == {"bind": "/workspace/reports", "mode": "rw"}
    assert kwargs["image"] == docker_run.IMAGE and kwargs["command"] == ["-k", "x"]


# ci/entry.sh's control flow, with a stub interpreter standing in for python + torch + dyt.
_STUB = r"""#!/usr/bin/env bash
if [[ "$1" == "-c" && "$2" == *device_count* ]]; then echo "${STUB_GPU_COUNT:-1}"; exit 0; fi
if [[ "$1" == "-c" ]]; then echo "${STUB_GPU:-}"; exit 0; fi
if [[ "$1" == "-" ]]; then exec "$STUB_REAL_PYTHON" "$@"; fi
echo "$*" >> "$STUB_LOG"
case "$1 $2" in
  "-m dyt.service.gpu_matrix") sleep "${STUB_MATRIX_SLEEP:-0}"; exit "${STUB_MATRIX_RC:-0}" ;;
  "-m pytest") sleep "${STUB_MATRIX_SLEEP:-0}"; exit "${STUB_MATRIX_RC:-0}" ;;
  "-m dyt") ;;
  *) exec "$STUB_REAL_PYTHON" "$@" ;;
esac
if [[ "$3" == "bench" ]]; then exit "${STUB_BENCH_RC:-0}"; fi
if [[ "$3" == "report" ]]; then
  head -c "${STUB_SUMMARY_BYTES:-10}" /dev/zero | tr '\0' 'x' > "$DYT_REPORTS/summary.md"
  exit "${STUB_REPORT_RC:-0}"
fi
exit 99
"""


@pytest.fixture
def entry(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    stub = tmp_path / "python-stub"
    stub.write_text(_STUB)
    stub.chmod(0o755)
    reports = tmp_path / "reports"
    (reports / "baselines").mkdir(parents=True)
    log = tmp_path / "calls.log"

    def run(*args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DYT_"))}
        full = {
            **base,
            "DYT_PYTHON": str(stub),
            "DYT_REPORTS": str(reports),
            "STUB_LOG": str(log),
            "STUB_REAL_PYTHON": sys.executable,
            **env,
        }
        proc = subprocess.run(
            ["bash", str(ENTRY), *args], cwd=tmp_path, env=full, capture_output=True, text=True, timeout=120
        )
        calls = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return proc, calls

    run.reports = reports
    run.env = lambda **env: {**{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DYT_"))},
                             "DYT_PYTHON": str(stub), "DYT_REPORTS": str(reports), "STUB_LOG": str(log),
                             "STUB_REAL_PYTHON": sys.executable, **env}  # fmt: skip
    run.calls = lambda: log.read_text().splitlines() if log.exists() else []
    return run


def test_entry_exit_code_is_the_matrix(entry):
    proc, calls = entry("-k", "name with space", STUB_MATRIX_RC="1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert calls[0] == "-m dyt.service.gpu_matrix -k name with space"
    assert any(c.startswith("-m dyt bench") for c in calls) and any("-m dyt report" in c for c in calls)
    assert "1/3 GPU matrix" in proc.stdout and "3/3 report" in proc.stdout

    proc, _ = entry(STUB_BENCH_RC="1", STUB_REPORT_RC="1")  # no baseline: bench and report only warn
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no regression gate" in proc.stdout


def test_entry_gates_against_this_gpus_baseline(entry):
    other = {"env": {"gpu_name": "NVIDIA A100-SXM4-80GB"}}
    mine = {"env": {"gpu_name": "NVIDIA H200"}}
    (entry.reports / "baselines" / "nvidia-a100-sxm4-80gb.json").write_text(json.dumps(other))
    (entry.reports / "baselines" / "nvidia-h200.json").write_text(json.dumps(mine))

    proc, calls = entry(STUB_GPU="NVIDIA H200", STUB_BENCH_RC="1", DYT_MARGIN="0.1")
    bench = next(c for c in calls if c.startswith("-m dyt bench"))
    assert bench == f"-m dyt bench --compare {entry.reports}/baselines/nvidia-h200.json --margin 0.1"
    assert proc.returncode == 1, "a failed gate is an error"

    proc, _ = entry(STUB_GPU="NVIDIA H200", STUB_BENCH_RC="1", DYT_GATE="warn")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    proc, calls = entry(STUB_GPU="NVIDIA H100 80GB HBM3")
    assert "-m dyt bench" in calls, calls  # no baseline of this GPU: no gate


def test_entry_names_a_stopped_bench(entry):
    """Exit 3 from the bench (dyt.service.run_control.STOPPED: a time limit's SIGTERM) says so: its rows so
    far are written and the gate did not run, an error where there was a gate to run (DYT_GATE=warn: a
    warning)."""
    proc, _ = entry(STUB_BENCH_RC="3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bench stopped early (exit 3)" in proc.stdout + proc.stderr
    baseline = {"env": {"gpu_name": "NVIDIA H200"}}
    (entry.reports / "baselines" / "nvidia-h200.json").write_text(json.dumps(baseline))
    proc, _ = entry(STUB_GPU="NVIDIA H200", STUB_BENCH_RC="3")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert (
        "regression gate against" in proc.stdout + proc.stderr and "did not run" in proc.stdout + proc.stderr
    )
    proc, _ = entry(STUB_GPU="NVIDIA H200", STUB_BENCH_RC="3", DYT_GATE="warn")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_entry_stopped_during_the_matrix_skips_the_bench_and_still_reports(entry, tmp_path):
    """A time limit's SIGTERM to the process group while the matrix runs: the script waits for the matrix
    step to end, skips the bench, writes the report, and exits non-zero."""
    proc = subprocess.Popen(["bash", str(ENTRY)], cwd=tmp_path, env=entry.env(STUB_MATRIX_SLEEP="60"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not entry.calls() and time.monotonic() < deadline:  # the matrix stub has started
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    calls = entry.calls()
    assert calls[0].startswith("-m dyt.service.gpu_matrix"), calls
    assert not any(c.startswith("-m dyt bench") for c in calls), calls
    assert any(c.startswith("-m dyt report") for c in calls), calls
    assert "bench: skipped (stopped by SIGTERM" in out and "stopped by SIGTERM" in out, out
    assert proc.returncode != 0


def test_entry_skips_bench_and_fills_the_step_summary(entry, tmp_path):
    summary = tmp_path / "step-summary.md"
    proc, calls = entry(DYT_SKIP_BENCH="1", GITHUB_STEP_SUMMARY=str(summary), STUB_SUMMARY_BYTES="2000000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not any(c.startswith("-m dyt bench") for c in calls)
    assert "skipped (DYT_SKIP_BENCH=1)" in proc.stdout
    written = summary.read_bytes()
    assert len(written) < 1024 * 1024 and b"truncated" in written


def test_entry_args_from_workflow_input(entry):
    _, calls = entry(DYT_PYTEST_ARGS="-m grid_limit -x")
    assert calls[0] == "-m dyt.service.gpu_matrix -m grid_limit -x"


def test_cold_start_benchmark_times_an_empty_and_a_warm_cache(tmp_path):
    """benchmarks/cold_start.py runs two fresh processes over one Triton cache directory, the first starting
    empty: the issue's cold-start measurement. With a GPU its children run there; without one, on the CPU
    through the Triton interpreter (the GPU machine's Triton 3.6 interpreter cannot run the backward)."""
    import torch

    out = tmp_path / "cold.json"
    on_gpu = torch.cuda.is_available()
    env = dict(os.environ) if on_gpu else {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "cold_start.py"), "--shape", "40x64", "--dtype", "fp32",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["shape"] == [40, 64] and result["dtype"] == "fp32"
    for name in ("empty_cache", "warm_cache"):
        run = result[name]
        assert all(run[k] > 0 for k in ("import_s", "torch_first_backward_s", "forward_s", "backward_s")), run
        assert (run["device"] != "cpu") == on_gpu, run
        assert f"{name}: import" in proc.stdout


def test_entry_without_a_gpu_exits_2_and_says_so(entry):
    proc, calls = entry(STUB_GPU_COUNT="0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no CUDA GPU is visible" in proc.stderr and "--gpus all" in proc.stderr
    assert "DYT_MATRIX=interpreter" in proc.stderr
    assert calls == [], "nothing runs without a GPU"


def test_entry_unwritable_reports_is_a_message_and_exit_2(entry, tmp_path):
    """mkdir under set -e must not end the script before the writability message (root can write
    anywhere, so the folder sits below a plain file, where no uid can make it)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc, calls = entry(DYT_REPORTS=str(blocker / "reports"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"cannot write to {blocker / 'reports'} as uid" in proc.stderr
    assert "mkdir:" not in proc.stderr and calls == []


def test_entry_interpreter_matrix_writes_tests_junit_and_skips_the_bench(entry):
    proc, calls = entry("-m", "tooling", DYT_MATRIX="interpreter", DYT_CPU_WORKERS="2", STUB_GPU_COUNT="0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls[0] == (
        f"-m pytest --junitxml={entry.reports}/junit/tests.xml -o junit_suite_name=tests"
        " -n 2 --dist worksteal -m tooling"
    )
    assert not any(c.startswith("-m dyt bench") for c in calls) and any("-m dyt report" in c for c in calls)
    assert "bench: skipped (DYT_MATRIX=interpreter" in proc.stdout
    proc, _ = entry(DYT_MATRIX="cuda")
    assert proc.returncode == 2 and "expected gpu or interpreter" in proc.stderr


def test_entry_says_when_the_baseline_has_another_toolchain(entry, tmp_path):
    import importlib.metadata as md

    import torch

    # the toolchain as ci/entry.sh reads it: torch's and Triton's versions, torch's CUDA (None: a CPU build)
    here = {"torch": md.version("torch"), "triton": md.version("triton"), "cuda": torch.version.cuda}
    summary = tmp_path / "step-summary.md"
    other = {"env": {"gpu_name": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0"}}
    (entry.reports / "baselines" / "nvidia-h200.json").write_text(json.dumps(other))
    proc, _ = entry(STUB_GPU="NVIDIA H200", GITHUB_STEP_SUMMARY=str(summary))
    out = proc.stdout + proc.stderr
    assert "the gate compares different toolchains" in out, out
    assert "torch 2.11.0+cu130, triton 3.6.0, cuda 13.0" in out and f"torch {here['torch']}" in out
    assert "different toolchains" in summary.read_text()

    same = {"env": {"gpu_name": "NVIDIA H200", **here}}
    (entry.reports / "baselines" / "nvidia-h200.json").write_text(json.dumps(same))
    proc, _ = entry(STUB_GPU="NVIDIA H200")
    assert "toolchain" not in proc.stdout + proc.stderr


def test_entry_sigterm_to_the_script_alone_reaches_the_matrix(entry, tmp_path):
    """`docker stop` signals PID 1 only: the script passes SIGTERM on to the matrix, which stops at once;
    the bench is skipped and the report still runs."""
    proc = subprocess.Popen(["bash", str(ENTRY)], cwd=tmp_path, env=entry.env(STUB_MATRIX_SLEEP="60"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not entry.calls() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)  # the script's pid, not its process group
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert took < 20, f"the matrix ran on for {took:.0f} s after the SIGTERM"
    calls = entry.calls()
    assert not any(c.startswith("-m dyt bench") for c in calls), calls
    assert any(c.startswith("-m dyt report") for c in calls), calls
    assert "stopped by SIGTERM" in out and proc.returncode != 0, out
