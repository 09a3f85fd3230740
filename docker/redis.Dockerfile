# Redis for the stack in containers (clepsydra/redis): Debian's redis-server, as uid 10001,
# append-only file under /data (a volume), port CLEPSYDRA_REDIS_PORT (default 6380, the local
# stack's). REDIS_BASE_IMAGE is a Debian bookworm with redis-server: tools/images.py makes
# clepsydra/base-redis:bookworm from Debian's packages (docker/base.sh redis); with a registry,
# any Debian-based image with redis-server installed will do.

ARG REDIS_BASE_IMAGE=clepsydra/base-redis:bookworm

FROM ${REDIS_BASE_IMAGE}
RUN mkdir -p /data && chown 10001:10001 /data
ENV CLEPSYDRA_REDIS_PORT=6380 CLEPSYDRA_REDIS_BIND=0.0.0.0
WORKDIR /data
USER 10001:10001
EXPOSE 6380
HEALTHCHECK --interval=5s --timeout=5s --start-period=20s --retries=3 \
    CMD ["sh", "-c", "redis-cli -p \"$CLEPSYDRA_REDIS_PORT\" ping | grep -q PONG"]
# the same flags as `make run`'s Redis: AOF, fsync every second, no RDB snapshots
CMD ["sh", "-c", "exec redis-server --port \"$CLEPSYDRA_REDIS_PORT\" --bind \"$CLEPSYDRA_REDIS_BIND\" --protected-mode no --dir /data --appendonly yes --appendfsync everysec --save ''"]
