# The Python services' images: one Dockerfile, one target per service (docker/README.md).
#
#   python -m tools.images build        (make images) builds every target, tagged
#                                       clepsydra/<target>:<version> and :dev
#   docker build -f docker/service.Dockerfile --target store --build-arg PYTHON_IMAGE=... .
#
# The build context is the repository root, of which .dockerignore lets in only the wheelhouse
# (build/wheelhouse, made on the host by tools/images.py) and healthcheck.py: the builder stage
# installs from it with `pip install --no-index`, so a build needs no network. The runtime
# stage holds the virtualenv only: no compiler, no pip, no pip cache, no wheelhouse, no tests.
# Every target runs as uid 10001 with its data under /data (a volume; the root filesystem can
# be read-only, with a tmpfs on /tmp) and no secrets: settings come from CLEPSYDRA_* variables.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: the virtualenv, from the wheelhouse ------------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# third-party wheels first: this layer changes only with requirements/images.txt. The
# kubernetes client (the scheduler's autoscaler, `clepsydra k8s`) ships an asyncio copy of
# itself, kubernetes/aio (~70 MB with its bytecode), that nothing here imports, and grpcio-tools
# (the protocol compiler, 8 MB) comes with the official RocketMQ client whose generated modules
# the gateway takes: both left out, the service images stay under 300 MB (docker/README.md)
COPY build/wheelhouse/deps/ /wheels/deps/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --no-index --no-deps /wheels/deps/*.whl \
    && rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio \
       /opt/venv/lib/python3*/site-packages/grpc_tools
COPY build/wheelhouse/project/ /wheels/project/
# --no-deps above and here: the lock is the whole closure; `pip check` proves it
RUN /opt/venv/bin/pip install --no-cache-dir --no-index --no-deps /wheels/project/*.whl \
    && /opt/venv/bin/pip check \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
    && /opt/venv/bin/pip uninstall -q -y pip setuptools

# ---- runtime: what every service image shares ----------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime-base
# /data: the services' data (volumes); created here so a fresh named volume takes its owner
RUN mkdir -p /data/store/consumequeue /data/scheduler /data/exports /data/reports /data/analytics \
    && chown -R 10001:10001 /data
COPY docker/healthcheck.py /opt/clepsydra/healthcheck.py
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    CLEPSYDRA_HOME=/data \
    CLEPSYDRA_STORE_BIND=0.0.0.0 \
    CLEPSYDRA_RETRY_BIND=0.0.0.0 \
    CLEPSYDRA_SCHEDULER_BIND=0.0.0.0 \
    CLEPSYDRA_GATEWAY_BIND=0.0.0.0 \
    CLEPSYDRA_ANALYTICS_BIND=0.0.0.0
WORKDIR /data
USER 10001:10001

FROM runtime-base AS runtime
COPY --from=builder /opt/venv /opt/venv

# ---- one target per service -----------------------------------------------------------------
FROM runtime AS store
# CommitLog (and the store's small config, index, checkpoint) under /data/store, ConsumeQueue
# under /data/store/consumequeue: mount a volume on each
ENV CLEPSYDRA_STORE_DIR=/data/store
EXPOSE 8081
HEALTHCHECK --interval=5s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "/opt/clepsydra/healthcheck.py", "CLEPSYDRA_STORE_PORT", "8081"]
CMD ["python", "-m", "clepsydra_store"]

FROM runtime AS scheduler-worker
EXPOSE 8083
HEALTHCHECK --interval=5s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "/opt/clepsydra/healthcheck.py", "CLEPSYDRA_SCHEDULER_PORT", "8083"]
CMD ["python", "-m", "clepsydra_scheduler", "worker"]

FROM runtime AS scheduler-beat
EXPOSE 8084
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/opt/clepsydra/healthcheck.py", "CLEPSYDRA_SCHEDULER_BEAT_PORT", "8084"]
CMD ["python", "-m", "clepsydra_scheduler", "beat"]

FROM runtime AS retry
EXPOSE 8082
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/opt/clepsydra/healthcheck.py", "CLEPSYDRA_RETRY_PORT", "8082"]
CMD ["python", "-m", "clepsydra_retry"]

FROM runtime AS console
ENV CLEPSYDRA_CONSOLE_BIND=0.0.0.0
EXPOSE 8087
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/opt/clepsydra/healthcheck.py", "CLEPSYDRA_CONSOLE_PORT", "8087"]
CMD ["python", "-m", "clepsydra_console"]

FROM runtime AS gateway
# RocketMQ 5 gRPC on 8088; its /healthz, /livez and /metrics on 8089
EXPOSE 8088 8089
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/opt/clepsydra/healthcheck.py", "CLEPSYDRA_GATEWAY_HEALTH_PORT", "8089"]
CMD ["python", "-m", "clepsydra_gateway"]

# ---- analytics (built only when services/analytics exists: tools/images.py) ---------------
# Last in the file: the classic builder builds every stage before the target it is asked for.
FROM builder AS builder-analytics
# its dependencies beyond requirements/images.txt, then its own wheel (tools/images.py). The
# exporter and `serve` run no Spark job and draw no chart: PySpark, py4j (~460 MB) and
# matplotlib with its dependencies (numpy among them, ~170 MB) are only in
# clepsydra/analytics-spark, and pyarrow's Arrow Flight libraries, tests, headers and Cython
# sources (~45 MB) are dropped (pyarrow needs no numpy to write Parquet). `pip check`
# would miss them; importing the exporter, the API and pyarrow's Parquet and file systems (S3
# too) proves what they need is there.
COPY build/wheelhouse/analytics-deps/ /wheels/analytics-deps/
RUN /opt/venv/bin/python -m ensurepip \
    && find /wheels/analytics-deps -name '*.whl' ! -name 'pyspark-*' ! -name 'py4j-*' \
       ! -name 'matplotlib-*' ! -name 'contourpy-*' ! -name 'cycler-*' ! -name 'fonttools-*' \
       ! -name 'kiwisolver-*' ! -name 'pillow-*' ! -name 'pyparsing-*' ! -name 'numpy-*' \
       -exec /opt/venv/bin/python -m pip install --no-cache-dir --no-index --no-deps {} + \
    && PA="$(/opt/venv/bin/python -c 'import os, pyarrow; print(os.path.dirname(pyarrow.__file__))')" \
    && rm -rf "$PA/tests" "$PA/include" "$PA"/*.pyx "$PA"/*.pxd "$PA"/includes \
       "$PA"/_flight.* "$PA/flight.py" "$PA"/libarrow_flight.* "$PA"/libarrow_python_flight.*
COPY build/wheelhouse/analytics/ /wheels/analytics/
RUN /opt/venv/bin/python -m pip install --no-cache-dir --no-index --no-deps \
       /wheels/analytics/*.whl \
    && /opt/venv/bin/python -c "import clepsydra_analytics.exporter, clepsydra_analytics.app, \
pyarrow.parquet, pyarrow.fs, pyarrow.dataset; pyarrow.fs.S3FileSystem" \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
    && /opt/venv/bin/python -m pip uninstall -q -y pip setuptools

# `export` (the default) consumes the exported topics into Parquet under /data/exports;
# `serve` serves the reports: the compose file and the manifests choose. Both answer /healthz.
FROM runtime-base AS analytics-exporter
COPY --from=builder-analytics /opt/venv /opt/venv
EXPOSE 8085
# the exporter's own /healthz (503 when its loop is stuck) on CLEPSYDRA_ANALYTICS_EXPORTER_PORT,
# which defaults to the API's CLEPSYDRA_ANALYTICS_PORT; `serve` answers on the latter
HEALTHCHECK --interval=5s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "/opt/clepsydra/healthcheck.py", "CLEPSYDRA_ANALYTICS_EXPORTER_PORT", \
         "CLEPSYDRA_ANALYTICS_PORT", "8085"]
CMD ["python", "-m", "clepsydra_analytics", "export"]
