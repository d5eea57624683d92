# The CUDA image that runs the GPU matrix exactly as CI does (docs/CONTAINER.md).
#
#   docker build -t dyt-kernels:latest --build-arg GIT_SHA="$(git rev-parse HEAD)" .
#   docker run --gpus all --ipc=host -v "$PWD/reports:/workspace/reports" dyt-kernels:latest
#
# Base: CUDA 12.8 devel (nvcc, headers; Hopper sm_90) on Ubuntu 24.04. Pinned by tag here; to pin by
# digest too, pass the tag@digest (from `docker buildx imagetools inspect <tag>`) as CUDA_IMAGE, e.g.
#   --build-arg CUDA_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:<digest>
# (the digest is not written here because it could not be verified where this file was written).
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

# torch and triton pinned to the versions the CPU CI uses (ci/constraints-cpu.txt); on Linux x86_64 the
# PyPI wheels of torch are CUDA builds that bring their own CUDA runtime. TORCH_INDEX_URL may name a
# PyTorch wheel index for another CUDA build (empty: PyPI).
ARG TORCH_VERSION=2.13.0
ARG TRITON_VERSION=3.9.0
ARG TORCH_INDEX_URL=""
ARG NOX_VERSION=2026.10.20
# The package's git SHA, recorded in env.json and perf/<gpu>-<sha>.json (.git is not copied in).
ARG GIT_SHA=unknown

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# gcc and the Python headers: Triton compiles a small C launcher at run time. git: the version stamp
# when the repository is mounted. Versions come with the pinned base image's Ubuntu release.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        gcc g++ python3 python3-dev python3-venv git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# A non-root user (uid 1000, replacing Ubuntu's default user) with a writable HOME and Triton cache.
# HOME and the caches are world-writable so that `docker run --user "$(id -u):$(id -g)"` works too.
RUN (userdel --remove ubuntu 2>/dev/null || true) \
    && useradd --create-home --uid 1000 --shell /bin/bash dyt \
    && mkdir -p /home/dyt/.triton/cache /home/dyt/.cache /workspace/reports /opt/dyt/baselines \
    && chmod 1777 /home/dyt /home/dyt/.triton /home/dyt/.triton/cache /home/dyt/.cache /workspace/reports \
    && chown -R dyt:dyt /workspace /opt/dyt

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
    DYT_BASELINES=/opt/dyt/baselines \
    DYT_GIT_SHA=${GIT_SHA}

# The toolchain layer (large, rarely changes): torch, triton and nox, pinned; every later pip install in
# the image (nox sessions included) keeps them through PIP_CONSTRAINT.
RUN mkdir -p "$VIRTUAL_ENV" \
    && printf 'torch==%s\ntriton==%s\n' "$TORCH_VERSION" "$TRITON_VERSION" > "$PIP_CONSTRAINT" \
    && python3 -m venv "$VIRTUAL_ENV" \
    && pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL" --extra-index-url https://pypi.org/simple} \
        "torch==${TORCH_VERSION}" "triton==${TRITON_VERSION}" \
    && pip install "nox==${NOX_VERSION}"

WORKDIR /workspace
COPY --chown=dyt:dyt . /workspace
# The committed baselines, also outside reports/ so that mounting an empty reports folder keeps the gate.
RUN pip install -e ".[test,report]" \
    && if [ -d reports/baselines ]; then cp -r reports/baselines/. /opt/dyt/baselines/; fi \
    && chmod 0755 ci/entry.sh

USER 1000:1000
VOLUME ["/workspace/reports"]
ENTRYPOINT ["/workspace/ci/entry.sh"]
CMD []
