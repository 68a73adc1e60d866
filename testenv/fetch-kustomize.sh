#!/usr/bin/env bash
# Fetch kustomize, the program `kubectl apply -k` embeds, from Debian's archive into $KZ_DIR.
#
# The manifests are a kustomize base with overlays; the tests build them with the real
# kustomize, not a re-implementation. Debian's stable suite has no kustomize package, so this
# reads `sid` through a PRIVATE apt configuration (nothing is installed system-wide), downloads
# the statically linked `kustomize` package (~7 MB) and unpacks it with `dpkg -x`.
#
# Needs: Debian with apt-get, dpkg, debian-archive-keyring. Usage: KZ_DIR=... fetch-kustomize.sh
set -euo pipefail

KZ_DIR=${KZ_DIR:?set KZ_DIR}
SUITE=${SUITE:-sid}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
WORK=$KZ_DIR/work
mkdir -p "$WORK/lists/partial" "$WORK/apt-cache/archives/partial" "$WORK/debs" "$KZ_DIR/bin"
chmod 777 "$WORK/debs"   # apt's _apt sandbox user writes downloads here

cat > "$WORK/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $SUITE main
SRC
APT_OPTS=(-o "Dir::Etc::SourceList=$WORK/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$WORK/lists" -o "Dir::Cache=$WORK/apt-cache"
          -o "Dir::State::status=/dev/null" -o APT::Architecture=amd64 -o Debug::NoLocking=1
          -o Acquire::Languages=none)
if [ "$(id -u)" = 0 ]; then APT_OPTS+=(-o APT::Sandbox::User=root); fi

apt-get "${APT_OPTS[@]}" update -qq
rm -f "$WORK"/debs/kustomize_*.deb
( cd "$WORK/debs" && apt-get "${APT_OPTS[@]}" -qq download kustomize )
deb=$(ls "$WORK"/debs/kustomize_*.deb | tail -n1)
rm -rf "$WORK/root"
dpkg -x "$deb" "$WORK/root"
install -m 0755 "$WORK/root/usr/bin/kustomize" "$KZ_DIR/bin/kustomize.new"
mv "$KZ_DIR/bin/kustomize.new" "$KZ_DIR/bin/kustomize"
basename "$deb" > "$KZ_DIR/package"
rm -rf "$WORK"   # lists, the .deb and the unpacked tree: only bin/kustomize is needed
"$KZ_DIR/bin/kustomize" version
