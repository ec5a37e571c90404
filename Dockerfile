# Kuberhealthy (Python): the daemon image the Helm chart deploys.
#   docker build -t kuberhealthy-python:0.1.0 .
# Runs as uid/gid 999 (the chart's securityContext default) and needs only /tmp writable, so it works
# with readOnlyRootFilesystem.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --system --gid 999 kuberhealthy \
 && useradd --system --uid 999 --gid 999 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin kuberhealthy

# Only what `pip install .` needs (see .dockerignore); the source is removed once installed.
WORKDIR /src
COPY setup.py pyproject.toml README.md ./
COPY kuberhealthy ./kuberhealthy
RUN pip install --no-cache-dir . \
 && cd / && rm -rf /src

WORKDIR /
USER 999:999
EXPOSE 8080
ENTRYPOINT ["kuberhealthy"]
CMD ["--config", "/etc/config/kuberhealthy.yaml"]
