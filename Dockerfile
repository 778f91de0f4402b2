# syntax=docker/dockerfile:1
# Kameleon: build a wheel in one stage, install it into a slim runtime in the next.

FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir --upgrade pip build
COPY pyproject.toml README.md ./
COPY core ./core
COPY service ./service
RUN python -m build --wheel --outdir /dist

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KAMELEON_HOST=0.0.0.0 \
    KAMELEON_PORT=8000 \
    KAMELEON_STORE=redis \
    KAMELEON_REDIS_URL=redis://redis:6379/0
COPY --from=build /dist /dist
RUN pip install --no-cache-dir /dist/*.whl && rm -rf /dist \
    && useradd --create-home --uid 10001 kameleon
USER kameleon
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('KAMELEON_PORT', '8000') + '/v1/health', timeout=2)"]
CMD ["kameleon", "serve", "--host", "0.0.0.0", "--store", "redis"]
