#!/usr/bin/env bash
# The fuzz campaign (issue 12): runs each named target (default: every target) for
# FUZZ_CAMPAIGN_SECONDS (default 1800), then minimises the corpus into fuzz/corpus/<target>.
# Usage: scripts/fuzz-campaign.sh [target...]; logs and the summary line per target go to
# $FUZZ_CAMPAIGN_DIR (default target/fuzz-campaign). Crashes land in fuzz/artifacts/<target>.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${FUZZ_CAMPAIGN_SECONDS:-1800}
out=${FUZZ_CAMPAIGN_DIR:-../target/fuzz-campaign}
mkdir -p "$out"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(RUSTC_BOOTSTRAP=1 cargo fuzz list)
fi
for t in "${targets[@]}"; do
    work="$out/$t.corpus"
    mkdir -p "$work"
    cp -n "corpus/$t"/* "$work"/ 2>/dev/null || true
    echo "$t: fuzzing for ${seconds}s"
    status=0
    RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "$work" -- -max_total_time="$seconds" \
        -print_final_stats=1 >"$out/$t.log" 2>&1 || status=$?
    if [ $status -ne 0 ]; then
        echo "$t: FAILED (exit $status), see $out/$t.log and fuzz/artifacts/$t" >&2
        continue
    fi
    # Minimise: merge the campaign's corpus into an empty directory, keep what adds coverage.
    min="$out/$t.min"
    rm -rf "$min" && mkdir -p "$min"
    RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "$min" "$work" -- -merge=1 >"$out/$t.merge.log" 2>&1
    rm -rf "corpus/$t" && mkdir -p "corpus/$t" && cp "$min"/* "corpus/$t"/
    runs=$(grep -E 'stat::number_of_executed_units' "$out/$t.log" | awk '{print $2}')
    echo "$t: ${runs:-?} runs in ${seconds}s, no crash; corpus $(ls "$work" | wc -l) -> $(ls "corpus/$t" | wc -l) after merge" | tee -a "$out/summary"
done
