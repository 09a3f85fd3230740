# The analytics Spark jobs' image (clepsydra/analytics-spark): Debian's Java 17 runtime, Python
# 3.11 and PySpark, from the same wheelhouse as the service images (tools/images.py builds it
# only when services/analytics exists). JAVA_IMAGE is a Debian bookworm with python3,
# python3-venv and openjdk-17-jre-headless: tools/images.py makes clepsydra/base-java:bookworm
# from Debian's packages (docker/base.sh java) when no registry is reachable.
#
#   docker run --rm -v clepsydra_exports:/data/exports clepsydra/analytics-spark:dev
#
# Runs `python -m clepsydra_analytics jobs run` (every job once, reports under /data/reports)
# as uid 10001; Spark's scratch space is /tmp (a tmpfs beside a read-only root filesystem).

ARG JAVA_IMAGE=clepsydra/base-java:bookworm

FROM ${JAVA_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
COPY build/wheelhouse/deps/ /wheels/deps/
COPY build/wheelhouse/analytics-deps/ /wheels/analytics-deps/
COPY build/wheelhouse/project/ /wheels/project/
COPY build/wheelhouse/analytics/ /wheels/analytics/
# clepsydra-client named as well: the analytics package imports it (its store reader)
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels/deps \
       --find-links /wheels/analytics-deps --find-links /wheels/project \
       --find-links /wheels/analytics clepsydra-analytics clepsydra-client \
    && /opt/venv/bin/pip check \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
    && /opt/venv/bin/pip uninstall -q -y pip setuptools

FROM ${JAVA_IMAGE}
COPY --from=builder /opt/venv /opt/venv
# Java takes user.home from the passwd entry, not $HOME (Spark's Ivy dir under it): give uid
# 10001 an entry whose home is the tmpfs
RUN useradd --uid 10001 --user-group --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin clepsydra \
    && mkdir -p /data/exports /data/reports /data/analytics && chown -R 10001:10001 /data
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    SPARK_LOCAL_DIRS=/tmp \
    SPARK_LOCAL_IP=127.0.0.1 \
    SPARK_LOCAL_HOSTNAME=localhost \
    CLEPSYDRA_HOME=/data
WORKDIR /data
USER 10001:10001
CMD ["python", "-m", "clepsydra_analytics", "jobs", "run"]
