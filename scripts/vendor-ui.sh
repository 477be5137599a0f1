#!/usr/bin/env bash
# Refreshes the chart library the dashboard embeds (internal/ui/static/vendor/)
# from the npm registry, pinned by version and checked by sha256, so the
# dashboard needs no CDN and no build step. To upgrade: change VERSION, run
# once with SHA256= (empty) to print the new tarball's hash, review the diff,
# then pin the hash here.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${VERSION:-1.6.32}"
SHA256="${SHA256-4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d}"
DEST=internal/ui/static/vendor/uplot

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@${VERSION}" >/dev/null)
tgz="$tmp/uplot-${VERSION}.tgz"
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [ -z "$SHA256" ]; then
  echo "uplot@${VERSION} sha256 ${got} (pin it in $0)"
elif [ "$got" != "$SHA256" ]; then
  echo "uplot@${VERSION}: sha256 ${got}, want ${SHA256}" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$tmp"
mkdir -p "$DEST"
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$DEST/"
echo "$VERSION" >"$DEST/VERSION"
echo "vendored uplot@${VERSION} into ${DEST}"
