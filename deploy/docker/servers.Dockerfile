# syntax=docker/dockerfile:1.7
# The servers' image: the ad server, the tracker, the prediction service, the advertiser API and the pacing
# dashboard share it, each started by its own command (`adserve serve ads|tracker|prediction|advertiser-api|
# dashboard`, deploy/k8s/base); the `adserve` command line is there too for operators' one-off tasks.
#
# Build from the repository root:
#   docker build -f deploy/docker/servers.Dockerfile -t REGISTRY/adserve:TAG .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ADSERVE_HOME=/var/lib/adserve \
    ADSERVE_SETTINGS_FILE=/etc/adserve/settings.toml \
    NUMBA_CACHE_DIR=/tmp/numba-cache

WORKDIR /opt/adserve
COPY pyproject.toml README.md ./
COPY adserve ./adserve
COPY core ./core
COPY schemas ./schemas
COPY streams ./streams
COPY jobs ./jobs
COPY pipelines ./pipelines
COPY serving ./serving
COPY learning ./learning
COPY sim ./sim
COPY bench ./bench
COPY infra ./infra
# Editable, so files the code finds beside its packages (schemas/history, infra/) are where a checkout has them.
RUN pip install -e /opt/adserve \
 && useradd --uid 10001 --home-dir /var/lib/adserve --create-home adserve

USER 10001
ENTRYPOINT ["adserve"]
CMD ["--help"]
