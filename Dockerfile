# Kuberhealthy (Python): the daemon image the Helm chart deploys.
#
#   docker build -t kuberhealthy-python:0.1.0 .          # or: make image (docker, podman or buildah)
#
# Two stages on the same base: `builder` builds the wheel (and fetches the dependencies' wheels from
# PyPI), `runtime` installs them into a virtualenv at /opt/kuberhealthy with no compiler, no pip and
# no build files left behind. The base is a build argument: the official slim Python image by default;
# `make image-test` passes a Debian-made one (mmdebstrap, python3 + python3-venv) when no container
# registry is reachable. Any Debian-like base with python3 >= 3.10 and venv works.
#
# Nothing here names an architecture: `podman build --platform linux/arm64` builds the arm64 image on the
# base's arm64 variant (pip takes that platform's wheels), under qemu-user-static on an amd64 machine.
# `make image-multiarch` builds linux/amd64 and linux/arm64 into one OCI image index (docs/release.md).
#
# At run time the image needs no shell (exec-form ENTRYPOINT), runs as uid/gid 999 (the chart's
# securityContext) and writes only to /tmp, so it works with readOnlyRootFilesystem.
# RUN --mount needs BuildKit (Docker's default builder since 23.0) or buildah/podman.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_DEFAULT_TIMEOUT=60 \
    PIP_RETRIES=10 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Only what the wheel is built from (see .dockerignore). kuberhealthy/checkclient.py is a symlink to the
# checker client's source in clients/python, which setup.py writes into the wheel as a regular file.
COPY setup.py pyproject.toml README.md ./
COPY kuberhealthy ./kuberhealthy
COPY clients/python/src/kuberhealthy_checkclient/__init__.py ./clients/python/src/kuberhealthy_checkclient/
# The wheel of this package plus every dependency's wheel, and pip's own wheel for the runtime stage.
# Behind a TLS-inspecting proxy, pass the CA bundle that trusts it as the build secret `ca-bundle`
# (docker/podman build --secret id=ca-bundle,src=/etc/ssl/certs/ca-certificates.crt; make image does).
# pip's download cache is a cache mount (BuildKit and buildah keep it), for quicker rebuilds.
RUN --mount=type=secret,id=ca-bundle \
    --mount=type=cache,target=/root/.cache/pip \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip wheel --wheel-dir /wheels . pip \
 && ls /wheels \
 && cd /wheels && sha256sum -- *.whl > /wheels.sha256

FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=""
ARG BASE_IMAGE
LABEL org.opencontainers.image.title="kuberhealthy-python" \
      org.opencontainers.image.description="Kuberhealthy in Python: synthetic health checks for Kubernetes, compatible with Kuberhealthy v2" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.url="https://kuberhealthy.github.io/kuberhealthy/" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/kuberhealthy/bin:$PATH
# The virtualenv gets no pip: pip runs from its wheel (a wheel is importable as a zip), offline, from
# the builder's wheels, which are bind-mounted and so leave no layer behind. Byte-code is compiled
# here, because the root filesystem is read-only at run time. The kubernetes client's asyncio copy
# (kubernetes/aio, ~70 MB with byte-code) is removed: the daemon uses the synchronous client only, and
# the import check below proves it still loads.
# A bind mount does not count in the build cache's key (buildah/podman reused a stale layer): the
# wheels' checksums, copied first, make this layer change whenever a wheel does.
COPY --from=builder /wheels.sha256 /opt/kuberhealthy-wheels.sha256
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python3 -m venv --without-pip /opt/kuberhealthy \
 && /opt/kuberhealthy/bin/python "$(ls /wheels/pip-*.whl)/pip" install --no-index --find-links /wheels \
      --no-cache-dir --disable-pip-version-check --no-warn-script-location kuberhealthy \
 && rm -rf /opt/kuberhealthy/lib/python3*/site-packages/kubernetes/aio \
 && /opt/kuberhealthy/bin/python -c "import kuberhealthy.daemon.services, kuberhealthy.web, kuberhealthy.daemon.server" \
 && /opt/kuberhealthy/bin/kuberhealthy --version \
 && groupadd --system --gid 999 kuberhealthy \
 && useradd --system --uid 999 --gid 999 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin kuberhealthy

WORKDIR /
USER 999:999
EXPOSE 8080
ENTRYPOINT ["/opt/kuberhealthy/bin/kuberhealthy"]
CMD ["--config", "/etc/config/kuberhealthy.yaml"]
