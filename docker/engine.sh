#!/bin/sh
# Make sure a Docker engine answers: use the one that does, else start Debian's dockerd here.
#
#   docker/engine.sh            start one if needed; exit 0 once `docker info` answers
#   docker/engine.sh --check    exit 0 if an engine answers or can be started here, else 1
#                               and one line on stderr saying why (used to skip the image tests)
#
# The engine is started as `dockerd --iptables=false --bridge=none` (no NAT, no bridge: every
# container of the stack uses the host network), with its state in CLEPSYDRA_DOCKER_ROOT
# (default /var/lib/docker, outside the build context) and its log in
# CLEPSYDRA_DOCKER_ROOT.log. It keeps running after this script ends (stop it with
# `kill $(cat /var/run/docker.pid)`); it needs root and the docker.io package (`make setup`
# installs it where apt is available).
set -eu

ROOT="${CLEPSYDRA_DOCKER_ROOT:-/var/lib/docker}"
LOG="${ROOT%/}.log"
check_only=0
[ "${1:-}" = "--check" ] && check_only=1

if docker info >/dev/null 2>&1; then
  exit 0
fi
why=""
if ! command -v docker >/dev/null 2>&1; then
  why="no docker client (install docker.io: make setup, as root, where apt is available)"
elif ! command -v dockerd >/dev/null 2>&1; then
  why="no engine answers and dockerd is not installed (install docker.io: make setup as root)"
elif [ "$(id -u)" != 0 ]; then
  why="no engine answers and starting dockerd needs root"
fi
if [ -n "$why" ]; then
  echo "docker engine unavailable: $why" >&2
  exit 1
fi
[ "$check_only" = 1 ] && exit 0

echo "starting dockerd --iptables=false --bridge=none (state $ROOT, log $LOG)"
mkdir -p "$ROOT"
# setsid + nohup: the engine outlives this script and the make that ran it
setsid nohup dockerd --iptables=false --bridge=none --data-root "$ROOT" \
  >"$LOG" 2>&1 </dev/null &
i=0
while ! docker info >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -gt 60 ]; then
    echo "dockerd did not answer within 60 s; last lines of $LOG:" >&2
    tail -n 20 "$LOG" >&2
    exit 1
  fi
  sleep 1
done
echo "docker engine ready"
