#!/bin/bash
# Lint the built packages as distributions do: `packaging/lint.sh [DIR]` (default dist/), run by
# `make packages` right after the build. lintian checks the .deb (overrides: the package's own
# /usr/share/lintian/overrides/nodeagent, source packaging/lintian-overrides), rpmlint the .rpm
# (filters: packaging/rpmlint.toml). Fails on any error AND on any warning that is not
# overridden there with its reason: a new warning is either fixed or justified, never ignored.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-$REPO/dist}
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$REPO/nodeagent/__init__.py")
release=${NODEAGENT_RELEASE:-1}
deb=$DIR/nodeagent_${version}-${release}_amd64.deb
rpm=$DIR/nodeagent-${version}-${release}.x86_64.rpm

for tool in lintian rpmlint; do
    command -v "$tool" >/dev/null ||
        { echo "lint.sh: $tool missing: make host-deps (tests/harness/host-packages.txt)" >&2; exit 1; }
done
status=0
echo ">>> lintian $(basename "$deb")"
# (lintian warns that it runs as root: CI and the VM tier build as root.)
lintian --fail-on error,warning --tag-display-limit 0 "$deb" 2> >(grep -v 'running with root privileges' >&2) ||
    status=1
echo ">>> rpmlint $(basename "$rpm")"
rpmlint --strict --config "$REPO/packaging/rpmlint.toml" "$rpm" || status=1
if [[ $status != 0 ]]; then
    echo "lint.sh: fix the package, or justify the tag in packaging/lintian-overrides or" \
        "packaging/rpmlint.toml" >&2
fi
exit $status
