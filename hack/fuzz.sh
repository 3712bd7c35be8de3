#!/usr/bin/env bash
# hack/fuzz.sh MINIMIZE TIME:PACKAGE:TARGET... — one short fuzz run of each
# TARGET in PACKAGE for TIME, as `make test` runs them.
#
# Each package's fuzz test binary is built once (`go test -c -fuzz`, with the
# coverage instrumentation fuzzing needs) and runs each of its targets in
# the package's directory, with the corpus cache `go test -fuzz` uses: a
# build per target took as long as the fuzzing. The builds come first, as
# many at once as there are cores; then the targets, as many at once as
# there are cores, each with one fuzz worker (-test.parallel 1), its output
# printed whole when it ends.
#
# Go 1.26's fuzz coordinator can report "context deadline exceeded" when
# -fuzztime ends while a worker is still busy (golang/go#75804, fixed in Go
# 1.27): a failure with no failing input. Such a run is reported and passes
# when that is the only failure and no new input was written under
# testdata/fuzz/TARGET; any other failure, or a failing input, fails.
set -uo pipefail
minimize=$1
shift
go=${GO:-go}
# The linker flags: the Makefile's TESTLDFLAGS (Go's defaults when unset).
ldflags=${TESTLDFLAGS-}
cache=$("$go" env GOCACHE) || exit 1
module=$("$go" list -m) || exit 1
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT

# binary PACKAGE: where PACKAGE's fuzz test binary goes.
binary() { echo "$bins/${1//\//_}.test"; }

# fuzz TIME PACKAGE TARGET: one target's run, with one worker; its status
# is the run's. What it printed is printed when it ends.
fuzz() {
	local time=$1 pkg=$2 target=$3
	local bin corpus="$pkg/testdata/fuzz/$target"
	bin=$(binary "$pkg")
	local before after fails rc out="$bins/${pkg//\//_}.$target.out"
	before=$(ls "$corpus" 2>/dev/null | sort)
	(cd "$pkg" && "$bin" -test.run '^$' -test.fuzz "^$target\$" -test.fuzztime "$time" \
		-test.fuzzminimizetime "$minimize" -test.parallel 1 -test.timeout 10m -test.paniconexit0 \
		-test.fuzzcachedir "$cache/fuzz/$module/${pkg#./}") >"$out" 2>&1
	rc=$?
	{ echo "fuzz $target in $pkg for $time (minimize $minimize)"; cat "$out"; } | flock "$bins/print.lock" cat
	[ "$rc" -eq 0 ] && return 0
	after=$(ls "$corpus" 2>/dev/null | sort)
	fails=$(grep -c -- '^--- FAIL' "$out")
	if [ "$before" = "$after" ] && [ "$fails" -eq 1 ] &&
		grep -A1 -- "^--- FAIL: $target " "$out" | tail -1 | grep -qx '[[:space:]]*context deadline exceeded'; then
		echo "$target: the fuzz run ended with Go's 'context deadline exceeded' and no failing input (golang/go#75804): passed"
		return 0
	fi
	echo "FAIL: $target in $pkg"
	return "$rc"
}

# Every package's binary first, as many builds at once as there are cores:
# each is mostly a link, which one core does, linked as the Makefile's
# TESTLDFLAGS says (without DWARF, by Go's own linker).
pkgs=()
for arg in "$@"; do
	rest=${arg#*:} pkg=${rest%%:*}
	[[ " ${pkgs[*]} " == *" $pkg "* ]] || pkgs+=("$pkg")
done
export go ldflags
printf '%s\n' "${pkgs[@]}" | while read -r pkg; do echo "$pkg $(binary "$pkg")"; done |
	xargs -P "$(nproc)" -L 1 bash -c 'echo "go test -c -fuzz . -ldflags=\"$ldflags\" -o $1 $0"; "$go" test -c -fuzz . -ldflags="$ldflags" -o "$1" "$0" || { echo "FAIL: build of $0"; exit 1; }' ||
	exit 1

# Then every target, as many at once as there are cores; any failure fails.
export minimize cache module bins
export -f binary fuzz
for arg in "$@"; do
	time=${arg%%:*} rest=${arg#*:}
	echo "$time ${rest%%:*} ${rest#*:}"
done | xargs -P "$(nproc)" -L 1 bash -c 'fuzz "$@"' fuzz || { echo "FAIL: make fuzz"; exit 1; }
