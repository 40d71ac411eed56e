# Tracing UI: Arize Phoenix, an OTLP receiver (gRPC :4317) with a web UI (:6006), fully offline.
# Built offline from wheelhouse-phoenix/ (scripts/build_wheelhouse.sh). Build context: a folder
# holding requirements-phoenix.lock and wheelhouse-phoenix/ (scripts/build_images.sh stages one).
ARG BASE=agentserve/base:bookworm

FROM ${BASE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY requirements-phoenix.lock /tmp/requirements-phoenix.lock
COPY wheelhouse-phoenix/ /wheelhouse/
RUN python3 -m venv /opt/phoenix \
    && /opt/phoenix/bin/pip install --no-index --find-links /wheelhouse \
        -r /tmp/requirements-phoenix.lock

FROM ${BASE}
RUN groupadd --gid 10001 phoenix \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin phoenix \
    && mkdir -p /data \
    && chown phoenix:phoenix /data
COPY --from=builder /opt/phoenix /opt/phoenix
# Offline and private: no CDN assets, no telemetry, none of the LLM-backed extras; no SQL echo in
# the logs.
ENV PATH=/opt/phoenix/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PHOENIX_HOST=0.0.0.0 \
    PHOENIX_PORT=6006 \
    PHOENIX_GRPC_PORT=4317 \
    PHOENIX_WORKING_DIR=/data \
    PHOENIX_ALLOW_EXTERNAL_RESOURCES=false \
    PHOENIX_TELEMETRY_ENABLED=false \
    PHOENIX_DISABLE_AGENT_ASSISTANT=true \
    PHOENIX_ENABLE_MCP_SERVER=false \
    PHOENIX_AGENTS_DISABLE_BASH=true \
    PHOENIX_DB_LOGGING_LEVEL=warning \
    PHOENIX_LOG_MIGRATIONS=false
WORKDIR /data
USER phoenix
EXPOSE 6006 4317
HEALTHCHECK --interval=5s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:6006/healthz', timeout=4)"]
CMD ["phoenix", "serve"]
