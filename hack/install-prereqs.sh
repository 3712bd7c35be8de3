#!/usr/bin/env bash
# Installs what rigger's sandbox, demo and tests need from Debian's archive.
# Shared by `make demo`, `make test` and CI. Does nothing when all is present.
set -euo pipefail

# command -> Debian package that provides it
declare -A want=(
  [ip]=iproute2
  [jq]=jq
  [git]=git
)

missing=()
for cmd in "${!want[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${want[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-prereqs: missing ${missing[*]}; run as root or install them: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "install-prereqs: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
