#!/usr/bin/env bash
# Builds Jaeger v2 (the all-in-one `jaeger` binary, an OpenTelemetry
# Collector distribution) for internal/traceexport's TestJaeger, and prints
# the binary's path.
#
# Jaeger lives in this separate module so that its large dependency tree
# stays out of tollgate's go.mod. `go install …@version` would refuse
# Jaeger's replace directive; this module carries it instead (see go.mod).
#
#   tools/jaeger/build.sh [OUT]     OUT defaults to tools/jaeger/bin/jaeger
#   TOLLGATE_JAEGER=$(tools/jaeger/build.sh) go test ./internal/traceexport/
#
# A binary newer than go.mod and go.sum is kept. A cold build (modules and
# build cache empty) takes minutes: see README.md beside this script.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/bin/jaeger}
case $out in /*) ;; *) out=$PWD/$out ;; esac

if [[ -x $out && $out -nt $here/go.mod && $out -nt $here/go.sum ]]; then
	echo "$out"
	exit 0
fi
mkdir -p "$(dirname "$out")"
cd "$here"
# GOWORK=off: a go.work above must not pull this module into tollgate's build.
GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" \
	go build -trimpath -o "$out.tmp" github.com/jaegertracing/jaeger/cmd/jaeger >&2
mv "$out.tmp" "$out"
echo "$out"
