# syntax=docker/dockerfile:1
# gpu-agent image: the agent (Python, Debian's bcc) and the CUPTI shim built against
# CUDA 12 and CUDA 13 headers, which the DaemonSet's init container copies onto nodes.
#
#   docker build -t gpu-agent:0.1.0 .        (podman build / buildah bud work the same)
#
# Base pinned by tag and digest (the multi-arch index of debian:bookworm-20250520-slim).
# The shim's glibc floor is its build image's: bookworm gives 2.34 (Ubuntu 22.04+, Debian 12+,
# RHEL 9+). For workload images older than that, build the shim on an older base:
#   --build-arg SHIM_BUILD_IMAGE=debian:bullseye-<date>-slim@sha256:<digest>   (glibc 2.31)
ARG BASE_IMAGE=debian:bookworm-20250520-slim@sha256:90522eeb7e5923ee2b871c639059537b30521272f10ca86fdbbbb2b75a8c40cd
ARG SHIM_BUILD_IMAGE=${BASE_IMAGE}

# ---------------------------------------------------------------- shim (CUDA 12 + 13)
FROM ${SHIM_BUILD_IMAGE} AS shim
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ make python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# Headers only (cuda.h, cuda_runtime_api.h, crt/, cupti*.h) from NVIDIA's wheels: one tree per
# CUDA major. Nothing of CUDA is linked: the shim finds libcuda/libcupti in the workload.
ARG CUDA12_WHEELS="nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-cupti-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86"
ARG CUDA13_WHEELS="nvidia-cuda-runtime==13.* nvidia-cuda-cupti==13.* nvidia-cuda-crt==13.* nvidia-cuda-nvcc==13.*"
# hadolint ignore=SC2086
RUN for v in 12 13; do \
      python3 -m venv /tmp/cuda$v \
      && wheels=CUDA${v}_WHEELS \
      && /tmp/cuda$v/bin/pip install --no-cache-dir --no-deps ${!wheels} \
      && mkdir -p /opt/cuda$v/include \
      && find /tmp/cuda$v -path '*nvidia*' -name include -type d \
           -exec sh -c 'cp -rn "$1"/. "$2"/' _ {} /opt/cuda$v/include \; \
      && test -f /opt/cuda$v/include/cupti.h \
      && rm -rf /tmp/cuda$v; \
    done
WORKDIR /src
COPY Makefile ./
COPY shim/ shim/
RUN for v in 12 13; do \
      make --no-print-directory shim CUDA_HOME=/opt/cuda$v BUILD=/out/cuda$v; \
    done \
 && ls -l /out/cuda12/libgpu_agent_shim.so /out/cuda13/libgpu_agent_shim.so

# ---------------------------------------------------------------- web UI bundle (build time only)
# d3-flame-graph and its parts, pinned by agent/gpu_agent/outputs/ui/bundle/package-lock.json, bundled by `make ui` into
# one offline script with its licenses (docs/ui.md); node never reaches the runtime image.
FROM ${BASE_IMAGE} AS ui
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends make nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY agent/gpu_agent/outputs/ui/bundle/ agent/gpu_agent/outputs/ui/bundle/
RUN make --no-print-directory ui && ls -l agent/gpu_agent/outputs/ui/static/vendor/

# ---------------------------------------------------------------- wheel (agent + native parts)
FROM ${BASE_IMAGE} AS wheel
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent/ agent/
COPY bpf/ agent/gpu_agent/_native/bpf/
COPY shim/include/ agent/gpu_agent/_native/include/
COPY --from=ui /src/agent/gpu_agent/outputs/ui/static/vendor/ agent/gpu_agent/outputs/ui/static/vendor/
COPY --from=shim /out/cuda12/libgpu_agent_shim.so agent/gpu_agent/_native/cuda12/
COPY --from=shim /out/cuda13/libgpu_agent_shim.so agent/gpu_agent/_native/cuda13/
RUN python3 -m venv /tmp/build \
 && /tmp/build/bin/pip install --no-cache-dir "pip>=23" "setuptools>=68" wheel \
 && /tmp/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation -w /dist . \
 && ls -l /dist

# ---------------------------------------------------------------- runtime
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
LABEL org.opencontainers.image.title="gpu-agent" \
      org.opencontainers.image.description="System-wide GPU profiler: eBPF agent and CUPTI shim (CUDA 12 and 13)" \
      org.opencontainers.image.licenses="Apache-2.0"
# bcc from Debian (python3-bpfcc pulls libbpfcc with its LLVM/clang); kernel headers come
# from the node (hostPath /lib/modules and /usr/src), matching its running kernel.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-bpfcc libbpfcc \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /dist/ /tmp/dist/
RUN python3 -m venv /opt/gpu-agent/venv \
 && /opt/gpu-agent/venv/bin/pip install --no-cache-dir /tmp/dist/gpu_agent-*.whl \
 && rm -rf /tmp/dist \
 && ln -s /opt/gpu-agent/venv/bin/gpu-agent /usr/local/bin/gpu-agent \
 && gpu-agent --version \
 && test -f "$(/opt/gpu-agent/venv/bin/python -c 'import gpu_agent, os; print(os.path.dirname(gpu_agent.__file__))')/_native/cuda12/libgpu_agent_shim.so"
# The shim files for distribution to nodes (`gpu-agent install-shim` copies the variant
# for the node's driver from the wheel; this copy is for `docker cp`/manual installs).
COPY --from=shim /out/cuda12/libgpu_agent_shim.so /opt/gpu-agent/shim/cuda12/
COPY --from=shim /out/cuda13/libgpu_agent_shim.so /opt/gpu-agent/shim/cuda13/
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Non-root by default: the image does nothing privileged unless asked to. Loading eBPF
# needs uid 0 with CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_SYS_RESOURCE (the DaemonSet
# and `docker run --user 0 --cap-add ...` grant exactly those; see deploy/).
USER 65532:65532
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["gpu-agent", "health"]
ENTRYPOINT ["gpu-agent"]
CMD ["run", "--output-dir", "/var/lib/gpu-agent"]
