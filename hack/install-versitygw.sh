#!/usr/bin/env bash
# Installs versitygw, the S3 server the etcd snapshot tests upload to, from
# the Go module proxy into $RIGGER_CACHE/bin (default /var/cache/rigger/bin),
# where it is kept between runs. Does nothing when that version is there.
# Prints the binary's path.
set -euo pipefail

version=v1.8.0
bin=${RIGGER_CACHE:-/var/cache/rigger}/bin
exe=$bin/versitygw

# The version a binary was built from, from its Go build information.
built() { go version -m "$1" 2>/dev/null | awk '$1 == "mod" && $2 == "github.com/versity/versitygw" {print $3}'; }

if [ -x "$exe" ] && [ "$(built "$exe")" = "$version" ]; then
  echo "$exe"
  exit 0
fi
mkdir -p "$bin"
echo "install-versitygw: go install github.com/versity/versitygw/cmd/versitygw@$version (about a minute)" >&2
GOGC=${GOGC:-400} GOBIN=$bin go install "github.com/versity/versitygw/cmd/versitygw@$version" >&2
echo "$exe"
