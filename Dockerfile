# syntax=docker/dockerfile:1
# Kameleon: build a wheel in one stage, install it into a slim runtime in the next.
# Base images are pinned by exact tag; every Python package by deploy/constraints.txt.
#
# Configuration comes from the environment (the ENV below are defaults, `docker run -e`
# overrides them); flags after `kameleon serve` override both. The service binds
# 0.0.0.0 and so needs API keys (KAMELEON_API_KEY_HASHES, or a file of hashes named by
# KAMELEON_API_KEY_HASHES_FILE): without any it refuses to start, unless
# KAMELEON_ALLOW_UNAUTHENTICATED=true says that the network it is on is trusted.

FROM python:3.11.16-slim-trixie AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY deploy/constraints.txt ./deploy/constraints.txt
RUN pip install --no-cache-dir --constraint deploy/constraints.txt setuptools wheel
COPY pyproject.toml README.md LICENSE ./
COPY core ./core
COPY service ./service
COPY kameleon ./kameleon
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /dist .

FROM python:3.11.16-slim-trixie AS runtime
LABEL org.opencontainers.image.title="kameleon" \
      org.opencontainers.image.description="A REST sampling service: adaptive, gradient-free MCMC over an ask/tell protocol" \
      org.opencontainers.image.licenses="BSD-3-Clause"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    KAMELEON_HOST=0.0.0.0 \
    KAMELEON_PORT=8000 \
    KAMELEON_STORE=redis \
    KAMELEON_REDIS_URL=redis://redis:6379/0 \
    KAMELEON_ALLOW_UNAUTHENTICATED=false
COPY deploy/constraints.txt /dist/constraints.txt
COPY --from=build /dist /dist
RUN pip install --no-cache-dir --constraint /dist/constraints.txt /dist/*.whl \
    && rm -rf /dist \
    && groupadd --gid 10001 kameleon \
    && useradd --uid 10001 --gid 10001 --no-log-init --create-home kameleon
# By number, not name: Kubernetes' runAsNonRoot can only check a numeric user.
USER 10001:10001
WORKDIR /home/kameleon
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('KAMELEON_PORT', '8000') + '/v1/health', timeout=2)"]
CMD ["kameleon", "serve"]
