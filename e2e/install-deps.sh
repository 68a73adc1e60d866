#!/bin/sh
# install-deps.sh: the Debian/Ubuntu packages `make demo`, `make cluster` and `make test` need,
# installed from scratch. The README's first command and .ci/run both run it.
#
# Works as root (a fresh container has no sudo) and as a user who may sudo; POSIX sh, since
# even make may be missing. Installs only what is missing, and refreshes the package lists
# when it installs or when there are none: `make prometheus` runs `apt-get download prometheus`
# from this machine's apt sources, which needs lists (as any user, once they exist). The
# control-plane and kustomize fetches use private apt lists of their own and need no root.
set -eu

# make and python3-venv: the entry points and the .venv; openssl: the test control plane's
# certificates; apt, dpkg, debian-archive-keyring and ca-certificates: fetching Debian's etcd,
# Kubernetes, Prometheus and kustomize packages; git: bench/soak.py records the commit.
PACKAGES="make python3 python3-venv openssl ca-certificates debian-archive-keyring apt dpkg git"

missing=""
for package in $PACKAGES; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  case "$status" in
    *" ok installed") ;;
    *) missing="$missing $package" ;;
  esac
done

have_lists=no
for list in "${APT_LISTS_DIR:-/var/lib/apt/lists}"/*_Packages*; do
  [ -e "$list" ] && have_lists=yes && break
done

if [ -z "$missing" ] && [ "$have_lists" = yes ]; then
  echo "install-deps: all present ($PACKAGES)"
  exit 0
fi

if [ "$(id -u)" = 0 ]; then
  as_root=""
elif command -v sudo >/dev/null 2>&1; then
  as_root="sudo"
else
  echo "install-deps: run this as root, or install sudo: apt-get needs root to install$missing" >&2
  exit 1
fi

echo "install-deps: apt-get update${missing:+, then install$missing}${as_root:+ (with sudo)}"
$as_root apt-get update -q
if [ -n "$missing" ]; then
  # shellcheck disable=SC2086 # one word per package
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi
