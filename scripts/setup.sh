#!/usr/bin/env bash
# Makes this machine ready for Amber, doing only what is missing:
#   1. a Python 3.12+ virtual environment in .venv with Amber installed;
#   2. a Docker engine that answers (as root on Debian: installs docker.io and starts dockerd);
#   3. the local base image amber-base:bookworm, built with debootstrap (no registry needed);
#   4. Debian's chromium and chromium-driver for the browser test of the UI (as root on Debian);
#   5. the servers the scale-out tests start on loopback: Debian's postgresql and openssl (as root on Debian).
# A second run finds everything in place and takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
say() { printf 'amber setup: %s\n' "$*"; }
die() { printf 'amber setup: %s\n' "$*" >&2; exit 1; }

# ---- 1. Python ------------------------------------------------------------
find_python() {
  local c
  for c in python3.12 python3.13 python3 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python; do
    if command -v "$c" >/dev/null 2>&1 &&
       "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}
stamp=$(sha256sum < pyproject.toml | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.amber-stamp 2>/dev/null)" != "$stamp" ]; then
  PY=$(find_python) || die "No Python 3.12 or newer found on PATH or under ~/.pyenv/versions: install Python 3.12 and run this again."
  say "creating the Python environment in .venv with $PY (a minute on a fresh machine)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[dev]"
  echo "$stamp" > .venv/.amber-stamp
fi

# ---- 2. Docker engine -----------------------------------------------------
docker_answers() { timeout 10 docker info >/dev/null 2>&1; }
if ! docker_answers; then
  if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
    die "The Docker engine is not answering: start it (for example 'sudo systemctl start docker') and run this again."
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    say "installing Debian's docker.io"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
  fi
  if ! docker_answers; then
    say "starting dockerd"
    # GOGC=400: dockerd runs its own binary again for every copy into a container (docker-untar) or out of one
    # (docker-tar) and for every container's network (set-ipv6), a few times per Trial, and its containerd, shims
    # and runc inherit the setting. Each start initializes all of dockerd's packages, and at Go's default (100)
    # collects garbage as it goes: a copy in and out took 100 ms of the machine's CPU, 54 with 400 (200 saved
    # nothing). dockerd's own heap may grow to 5x its live data instead of 2x (after the same 300 copies, 125 MB
    # resident instead of 94).
    GOGC=400 nohup dockerd >/var/log/amber-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do docker_answers && break; sleep 0.5; done
    docker_answers || die "dockerd did not start: see /var/log/amber-dockerd.log."
  fi
fi

# ---- 3. Base image ----------------------------------------------------------
BASE_IMAGE=amber-base:bookworm
PACKAGES=python3,tmux,bash,procps
recipe=$(printf 'bookworm minbase %s v1' "$PACKAGES" | sha256sum | cut -c1-16)
have=$(docker image inspect -f '{{ index .Config.Labels "org.amber.recipe" }}' "$BASE_IMAGE" 2>/dev/null || true)
if [ "$have" != "$recipe" ]; then
  [ "$(id -u)" = 0 ] || die "The base image $BASE_IMAGE is missing and building it needs root (debootstrap): run 'sudo make setup'."
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  fi
  mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
           | grep -v security | head -1 | awk '{print $2}' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  say "building $BASE_IMAGE from $mirror with debootstrap (about a minute)"
  rootfs=$(mktemp -d /tmp/amber-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$mirror" >/tmp/amber-debootstrap.log 2>&1 \
    || die "debootstrap failed (see /tmp/amber-debootstrap.log): check that the Debian mirror $mirror is reachable."
  tar -C "$rootfs" -c . | docker import -c "LABEL org.amber.recipe=$recipe" -c 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"; trap - EXIT
fi

# ---- 4. Browser for the UI test ---------------------------------------------
# tests/test_ui_browser.py drives the Dagster UI in Debian's headless Chromium and its driver (never a browser
# that Selenium would download); without them that test skips.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
    say "installing Debian's chromium and chromium-driver for the UI test"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null
  else
    say "no /usr/bin/chromium or /usr/bin/chromedriver: the browser test of the UI will skip (as root on Debian, this script installs them)"
  fi
fi
# ---- 5. Servers of the scale-out tests ------------------------------------------
# tests/servers/ starts its own PostgreSQL (as the postgres user, in its own folder and port) and a second
# dockerd with TLS material made by openssl; nothing here starts them.
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)  # the ssh:// engine test runs its own sshd on loopback
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
    say "installing Debian's ${missing[*]} for the scale-out tests"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "missing ${missing[*]}: the scale-out tests need them (as root on Debian, this script installs them)"
  fi
fi
say "ready: $(.venv/bin/python --version), Docker $(docker version -f '{{.Server.Version}}'), image $BASE_IMAGE"
