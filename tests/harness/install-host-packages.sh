#!/usr/bin/env bash
# Install the Debian packages listed (one per line, '#' comments) in the file given as $1.
# Idempotent; installs only what is missing. Never starts a system containerd or registry:
# the tests run their own private instances.
set -euo pipefail
list=${1:?usage: install-host-packages.sh FILE}
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list")
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "host packages: all ${#wanted[@]} present"
  exit 0
fi
echo "host packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps package postinsts from starting system daemons (containerd, registry).
prc=/usr/sbin/policy-rc.d
created_prc=0
if [ ! -e "$prc" ]; then printf '#!/bin/sh\nexit 101\n' >"$prc"; chmod +x "$prc"; created_prc=1; fi
trap '[ "$created_prc" = 1 ] && rm -f "$prc"' EXIT
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
