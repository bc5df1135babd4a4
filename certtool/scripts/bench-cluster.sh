#!/usr/bin/env bash
# Times `cumulo-cert cluster` for one host (P-256 keys, the default): RUNS fresh sets, each in a
# new directory, with the release build. Prints min / median / mean / max wall time in ms.
# Usage: certtool/scripts/bench-cluster.sh [RUNS]   (default 50; run from the repository root)
set -euo pipefail
runs=${1:-50}
cargo build --release --quiet -p certtool
bin=target/release/cumulo-cert
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
times=()
for i in $(seq 1 "$runs"); do
    start=$(date +%s%N)
    "$bin" cluster --host bench.test --ip 127.0.0.1 --directory "$work/$i" >/dev/null
    end=$(date +%s%N)
    times+=($(( (end - start) / 1000 )))
done
printf '%s\n' "${times[@]}" | sort -n | awk -v runs="$runs" '
    { t[NR] = $1; sum += $1 }
    END {
        printf "cumulo-cert cluster, %d runs: min %.1f ms, median %.1f ms, mean %.1f ms, max %.1f ms\n",
            runs, t[1] / 1000, t[int((NR + 1) / 2)] / 1000, sum / NR / 1000, t[NR] / 1000
    }'
