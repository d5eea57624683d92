# The CUDA image that runs the GPU matrix exactly as CI does (docs/CONTAINER.md).
#
#   docker build -t dyt-kernels:latest --build-arg GIT_SHA="$(git rev-parse HEAD)" .
#   docker run --gpus all --ipc=host -v "$PWD/reports:/workspace/reports" dyt-kernels:latest
#
# Base: NVIDIA's CUDA 13.0 "base" image on Ubuntu 24.04 (Python 3.12), pinned by digest. torch's PyPI
# wheels are CUDA 13.0 builds that bring their own CUDA libraries (nvidia-* wheels in the lock), so the
# image needs no CUDA toolkit: the base only carries the NVIDIA container runtime's settings and its
# CUDA >= 13.0 driver check. Triton ships its own ptxas and compiles its launcher with gcc at run time.
#
# The same file builds the CPU variant that `nox -s container_check` tests (ci/container_check.py):
#   --build-arg BASE_IMAGE=<a Debian image> --build-arg LOCK=ci/requirements-cpu-image.txt
# with the CPU torch wheel put in .wheels/ (WHEELS), which the install step reads before any index.
ARG BASE_IMAGE=nvidia/cuda:13.0.2-base-ubuntu24.04@sha256:2ab6381d970b211fb93853796dc6707eb8a72575a375c422b17cf4d8b2641701

# The repository, less the local wheels folder (those go to the toolchain layer only).
FROM ${BASE_IMAGE} AS source
COPY . /src
RUN rm -rf /src/.wheels

FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# gcc and the Python headers: Triton compiles a small C launcher at run time. git: the version stamp when
# the repository is mounted. Versions come with the digest-pinned base image's release.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        gcc g++ python3 python3-dev python3-venv git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# A non-root user (uid 1000, replacing Ubuntu's default user) with a writable HOME and Triton cache.
# HOME, the caches and reports/ are world-writable (sticky) so that `docker run --user <any uid>` works.
RUN (userdel --remove ubuntu 2>/dev/null || true) \
    && useradd --create-home --uid 1000 --shell /bin/bash dyt \
    && mkdir -p /home/dyt/.triton/cache /home/dyt/.cache /opt/dyt/baselines \
    && chmod 1777 /home/dyt /home/dyt/.triton /home/dyt/.triton/cache /home/dyt/.cache

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/home/dyt \
    TRITON_CACHE_DIR=/home/dyt/.triton/cache \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/opt/venv/constraints.txt \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DYT_REPORTS=/workspace/reports \
    DYT_BASELINES=/opt/dyt/baselines

# The toolchain layer (large, rarely changes): every package the image runs, from a lock with hashes
# (ci/requirements-gpu.txt: torch, triton, nox, setuptools and the package's [test,report] dependencies).
# PIP_CONSTRAINT keeps those versions for every later pip install in the image (nox sessions included).
ARG LOCK=ci/requirements-gpu.txt
ARG WHEELS=.wheels
COPY ${LOCK} /opt/venv/requirements.txt
COPY ${WHEELS}/ /tmp/wheels/
RUN python3 -m venv "$VIRTUAL_ENV" \
    && PIP_CONSTRAINT="" pip install --no-deps --require-hashes --only-binary=:all: --find-links /tmp/wheels \
        -r /opt/venv/requirements.txt \
    && sed -n 's/^\([A-Za-z0-9_.-]*==[^ ;\\]*\).*/\1/p' /opt/venv/requirements.txt > "$PIP_CONSTRAINT" \
    && rm -rf /tmp/wheels

# The package, its tests and CI files (.github included: the tooling tests read the workflows). reports/
# keeps its committed README and baselines; it is made world-writable after the copy, which resets modes.
WORKDIR /workspace
COPY --from=source --chown=1000:1000 /src /workspace
RUN pip install --no-deps --no-build-isolation -e . \
    && pip check \
    && mkdir -p reports \
    && chmod 1777 reports \
    && if [ -d reports/baselines ]; then cp -r reports/baselines/. /opt/dyt/baselines/; fi \
    && chmod 0755 ci/entry.sh

# The commit recorded in env.json and perf/<gpu>-<sha>.json (.git is not copied in). Last, so that a new
# commit rebuilds only the layers from here on.
ARG GIT_SHA=unknown
ENV DYT_GIT_SHA=${GIT_SHA}
LABEL org.opencontainers.image.title="dyt-kernels" \
      org.opencontainers.image.revision="${GIT_SHA}"

USER 1000:1000
VOLUME ["/workspace/reports"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/workspace/ci/entry.sh"]
CMD []
