#!/usr/bin/env bash
# Regenerates .cargo/symbol-order.txt: the functions a running certsync
# executes, which the static musl link lays out together (.cargo/config.toml)
# so that the code pages an idle process keeps resident are few (README,
# Benchmarks: idle).
#
#   benches/symbol-order.sh
#
# Run it after Cargo.lock or the toolchain changes, and before measuring
# idle RSS: the names carry hashes of the crate graph and the compiler, and
# LTO-local names carry a suffix (`.4900`) that shifts with any code
# change (a list made one commit earlier left 195 of 3,916 names unfound
# and idle RSS at 4.5 MiB instead of 3.6). .ci/image fails when fewer than
# 90 % of them are found in the build. Needs valgrind and musl-tools;
# takes about 20 minutes on 2 cores the first time (two release builds).
#
# How: the shipped build, with its symbols kept (a rustc flag: the same code
# and the same symbol names), runs the bench cases below under callgrind,
# which names every function the process enters. The process is killed at
# the end of each case, so callgrind dumps every second.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-musl
out=.cargo/symbol-order.txt
work=$(mktemp -d)
dumper=
cleanup() {
  [ -n "$dumper" ] && kill "$dumper" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

CC_x86_64_unknown_linux_musl=musl-gcc cargo build --locked --release --target "$target" \
  --target-dir target/symbol-order \
  --config "target.$target.rustflags=[\"-C\", \"strip=none\"]"
bin=$PWD/target/symbol-order/$target/release/certsync

cat >"$work/certsync" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --demangle=no --dump-instr=no --callgrind-out-file=$work/cg.%p.out $bin "\$@"
EOF
chmod +x "$work/certsync"
(while sleep 1; do callgrind_control --dump >/dev/null 2>&1 || true; done) &
dumper=$!

# What a deployed certsync does: start, sync Secrets and host directories,
# rotate, signal or call the reload hook, and idle through its resyncs and
# re-watches (a minute each, so `idle` runs in full).
for case in "idle" "secret --quick" "hostdir --quick"; do
  # shellcheck disable=SC2086 # the case carries its own flags
  # Bounded: on 2026-11-23 the hostdir case hung after its certsync died
  # under valgrind (the bench waiting on its signal receiver); the names
  # seen until then are kept.
  CERTSYNC_BIN="$work/certsync" timeout 900 cargo bench --bench certsync -- --only $case \
    || echo "symbol-order.sh: case '$case' failed or timed out; using what it ran" >&2
done
kill "$dumper"
dumper=

# Callgrind names a function once per file, `fn=(id) name`, then by id; a
# recursive call's name ends in 'DEPTH; code without a symbol is named by
# its address.
grep -h -o -E "^c?fn=\([0-9]+\) .+$" "$work"/cg.* | sed -E "s/^c?fn=\([0-9]+\) //; s/'[0-9]+$//" \
  | grep -v -E '^(0x[0-9a-f]+|\(below main\))$' | LC_ALL=C sort -u >"$out"
echo "$out: $(wc -l <"$out") functions"
# The order file is a linker input cargo does not track: relink.
touch src/main.rs
