#!/bin/sh
# Build a local base image from Debian's packages when the registry's image cannot be had.
#
#   docker/base.sh python IMAGE   Debian bookworm minbase + python3, python3-venv
#   docker/base.sh java IMAGE     the same + openjdk-17-jre-headless (the analytics-spark base)
#   docker/base.sh redis IMAGE    Debian bookworm minbase + redis-server (docker/redis.Dockerfile)
#
# Does nothing when IMAGE is already present. `debootstrap --variant=minbase` into a temporary
# folder (outside the build context), trimmed (docs, man pages, locales, apt lists and caches),
# then `tar | docker import`. CLEPSYDRA_DEBIAN_MIRROR overrides the mirror (default: the one
# apt uses here, else deb.debian.org).
set -eu

kind="$1"
image="$2"
if docker image inspect "$image" >/dev/null 2>&1; then
  exit 0
fi
command -v debootstrap >/dev/null 2>&1 || {
  echo "$image is not present and debootstrap is not installed (make setup installs it as root)" >&2
  exit 1
}
mirror="${CLEPSYDRA_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror=$(grep -rhoE '^(URIs:|deb) +http[^ ]+/debian/?( |$)' /etc/apt/sources.list \
             /etc/apt/sources.list.d 2>/dev/null | grep -oE 'http[^ ]+' | head -n 1 || true)
  mirror="${mirror:-http://deb.debian.org/debian}"
fi
case "$kind" in
  python) include="python3,python3-venv,ca-certificates" ;;
  java) include="python3,python3-venv,ca-certificates,openjdk-17-jre-headless" ;;
  redis) include="redis-server" ;;
  *) echo "usage: $0 python|java|redis IMAGE" >&2; exit 2 ;;
esac

dir=$(mktemp -d /var/tmp/clepsydra-base.XXXXXX)
trap 'rm -rf "$dir"' EXIT
echo "building $image: debootstrap --variant=minbase bookworm ($include) from $mirror"
debootstrap --variant=minbase --include="$include" bookworm "$dir" "$mirror" >"$dir.log" 2>&1 || {
  tail -n 30 "$dir.log" >&2; rm -f "$dir.log"; exit 1; }
rm -f "$dir.log"
# trim: what no service reads at run time
rm -rf "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* \
       "$dir"/usr/share/locale/* "$dir"/usr/share/lintian "$dir"/usr/share/bash-completion \
       "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/var/cache/debconf/*-old \
       "$dir"/var/log/* "$dir"/tmp/* "$dir"/root/.cache
find "$dir"/usr/lib/python3* -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
# the same environment python:3.11-slim sets
tar -C "$dir" --numeric-owner -c . | docker import \
  -c 'ENV LANG=C.UTF-8' \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c "CMD [\"$([ "$kind" = redis ] && echo redis-server || echo python3)\"]" \
  -m "debootstrap minbase bookworm: $include" - "$image" >/dev/null
docker image ls "$image" --format '{{.Repository}}:{{.Tag}} {{.Size}}'
