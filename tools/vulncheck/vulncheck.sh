#!/usr/bin/env bash
# Runs govulncheck on tollgate against a local copy of the Go vulnerability
# database, built from the golang.org/x/vulndb module: vuln.go.dev is not
# reachable from CI, the Go module proxy is. Arguments go to govulncheck.
#
#   tools/vulncheck/vulncheck.sh ./...                      # from the repository root
#   VULNCHECK_STDLIB=warn tools/vulncheck/vulncheck.sh ./...
#
# It fails when the code calls a vulnerable function of a module (upgrade
# that module), and, unless VULNCHECK_STDLIB=warn, of the standard library
# (fixed by a newer Go toolchain only). Vulnerabilities in packages that are
# imported or required but not called are not failures, as in govulncheck's
# own text output. The full govulncheck report is printed when it fails.
#
# govulncheck (golang.org/x/vuln, pinned by go.mod here) and the database
# (x/vulndb at VULNDB below) are built once into tools/vulncheck/bin/
# (git-ignored) and kept while they are newer than go.mod, go.sum, the Go
# files and this script. To take newer vulnerability data, move VULNDB to a newer
# pseudo-version (`go list -m -versions golang.org/x/vulndb` lists none: it
# has no tags; take the latest from `go list -m golang.org/x/vulndb@master`).
set -euo pipefail

VULNDB=v0.0.0-20261105234957-e22db6528018

here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
newer_than_inputs() {
	[[ -e $1 ]] || return 1
	local f
	for f in "$here"/go.mod "$here"/go.sum "$here"/*.go "$here"/vulncheck.sh; do
		[[ $1 -nt $f ]] || return 1
	done
}
mkdir -p "$bin"
if ! newer_than_inputs "$bin/govulncheck"; then
	# GOWORK=off: a go.work above must not pull this module into tollgate's build.
	(cd "$here" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" \
		go build -trimpath -o "$bin/govulncheck.tmp" golang.org/x/vuln/cmd/govulncheck)
	mv "$bin/govulncheck.tmp" "$bin/govulncheck"
fi
if ! newer_than_inputs "$bin/vulncheck"; then
	(cd "$here" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" go build -trimpath -o "$bin/vulncheck" .)
fi
if ! newer_than_inputs "$bin/vulndb/index/db.json"; then
	# The module's checksum is verified against the checksum database like
	# any module download; its data/osv holds one OSV file per entry.
	src=$(cd "$here" && GOWORK=off go mod download -json "golang.org/x/vulndb@$VULNDB" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -d $src/data/osv ]] || { echo "vulncheck: no data/osv in golang.org/x/vulndb@$VULNDB ($src)" >&2; exit 1; }
	# The pseudo-version's timestamp is the data's commit time.
	ts=${VULNDB#v0.0.0-}; ts=${ts%%-*}
	"$bin/vulncheck" -osv "$src/data/osv" -out "$bin/vulndb" \
		-modified "${ts:0:4}-${ts:4:2}-${ts:6:2}T${ts:8:2}:${ts:10:2}:${ts:12:2}Z"
fi
json=$(mktemp)
trap 'rm -f "$json"' EXIT
if ! "$bin/govulncheck" -db "file://$bin/vulndb" -format json "$@" >"$json"; then
	echo "vulncheck: govulncheck could not scan (see above)" >&2
	exit 1
fi
if ! "$bin/vulncheck" gate -stdlib "${VULNCHECK_STDLIB:-fail}" <"$json"; then
	"$bin/govulncheck" -db "file://$bin/vulndb" "$@" || true
	exit 1
fi
