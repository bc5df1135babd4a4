#!/usr/bin/env bash
# Bench smoke run (issue 26): every benchmark once, with small counts, so that CI fails when a
# benchmark no longer completes (a panic, a hang, a daemon it starts that dies). The figures it
# prints mean nothing (debug build, tiny counts, a busy machine): only PASS/FAIL does.
#
#   bash scripts/bench-smoke.sh                  # every bench
#   bash scripts/bench-smoke.sh agent/scale ...  # only these (crate/bench, as printed)
#
# Part of scripts/test.sh (after the workspace tests); runs on its own too.
#
# The bench binaries are built in the dev profile (`cargo build --benches`, not `cargo bench`):
# they share the test build's dependencies, so in CI this costs only the bench targets themselves.
# Each runs under `timeout`, so a hang fails instead of blocking CI. The etcd benches need `etcd`
# on PATH (Debian's etcd-server, installed by scripts/deps.sh): without it they are skipped with
# a reason, unless CUMULO_REQUIRE_ETCD=1 (scripts/test.sh sets it), which makes that a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# Seconds a bench may take before it counts as hung, unless its entry below says otherwise.
LIMIT=120

scratch=$(mktemp -d)
running=""
cleanup() {
    # `timeout` puts each bench in a process group of its own: whatever is left of the one
    # running (daemons it started) goes with it, on Ctrl-C as on a normal exit.
    if [ -n "$running" ]; then kill -KILL -- "-$running" 2>/dev/null || true; fi
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building the bench binaries (dev profile) and the binaries they start"
# The benches' own executables, from cargo's JSON messages (target/debug/deps also holds stale
# ones from older builds, so no glob). --bins: some benches start the daemons from target/debug
# (controller/load runs cumulo-scheduler beside cumulo-controller, systest/remote runs
# cumulo-agent through testkit::bins); cargo builds only a bench's own package's binaries.
cargo build --workspace --bins --benches --locked --message-format=json-render-diagnostics \
    >"$scratch/build.json"
declare -A exe=()
while read -r key path; do
    exe[$key]=$path
done < <(python3 - "$PWD" "$scratch/build.json" <<'EOF'
import json, os, sys
root, messages = sys.argv[1], sys.argv[2]
for line in open(messages):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or "bench" not in m["target"]["kind"]:
        continue
    if m.get("executable"):
        crate = os.path.relpath(os.path.dirname(m["manifest_path"]), root)
        print(f'{crate}/{m["target"]["name"]} {m["executable"]}')
EOF
)

only=("$@")
passed=0
failed=()
skipped=()
total_start=${EPOCHREALTIME/./}

# Whether crate/bench `$1` is among the ones asked for (all when none were).
wanted() {
    [ ${#only[@]} -eq 0 ] && return 0
    local o
    for o in "${only[@]}"; do [ "$o" = "$1" ] && return 0; done
    return 1
}

# skip BENCH REASON: a bench that cannot run here.
skip() {
    wanted "$1" || return 0
    printf 'SKIP  %-58s %s\n' "$1" "$2"
    skipped+=("$1")
}

# bench CRATE/BENCH LIMIT [NAME=VALUE ...] [-- ARG ...]: runs the bench's executable with those
# environment variables and arguments, at most LIMIT seconds.
bench() {
    local key=$1 limit=$2
    shift 2
    local envs=() args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    if [ $# -gt 0 ]; then shift; args=("$@"); fi
    wanted "$key" || return 0
    local label="$key${envs[*]:+ ${envs[*]}}${args[*]:+ ${args[*]}}"
    if [ -z "${exe[$key]:-}" ]; then
        printf 'FAIL  %-58s no executable in cargo'"'"'s output\n' "$label"
        failed+=("$label")
        return 0
    fi
    local log="$scratch/$(echo "$label" | tr -c 'A-Za-z0-9_.=-' _).log"
    local start=${EPOCHREALTIME/./} rc=0
    env "${envs[@]}" timeout --kill-after=10 "$limit" "${exe[$key]}" "${args[@]}" \
        </dev/null >"$log" 2>&1 &
    running=$!
    wait "$running" || rc=$?
    # Anything the bench left behind in its process group (a daemon it did not stop).
    kill -KILL -- "-$running" 2>/dev/null || true
    running=""
    local took=$(( ${EPOCHREALTIME/./} - start ))
    local secs
    secs=$(printf '%d.%d' $((took / 1000000)) $((took % 1000000 / 100000)))
    if [ "$rc" -eq 0 ]; then
        printf 'PASS  %-58s %6s s\n' "$label" "$secs"
        passed=$((passed + 1))
    else
        local why="exit status $rc"
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="timed out after $limit s"; fi
        printf 'FAIL  %-58s %6s s  (%s)\n' "$label" "$secs" "$why"
        echo "---- last lines of its output ----"
        tail -n 40 "$log"
        echo "----"
        failed+=("$label")
    fi
}

# Whether the etcd benches can run: `etcd` on PATH, as they start their own.
etcd_ok() { command -v etcd >/dev/null 2>&1; }
etcd_missing() {
    if [ "${CUMULO_REQUIRE_ETCD:-}" = 1 ]; then
        wanted "$1" || return 0
        printf 'FAIL  %-58s etcd is not on PATH (CUMULO_REQUIRE_ETCD=1)\n' "$1"
        failed+=("$1")
    else
        skip "$1" "etcd is not on PATH (Debian: etcd-server)"
    fi
}

echo
echo "running every bench once, small counts (limit $LIMIT s each unless noted)"

# ssntp: criterion's --test runs each benchmark function once, without measuring.
bench ssntp/codec "$LIMIT" -- --test

# ssntp-net: each case on its own, as `cargo bench -- <case>` runs it. throughput: 2,000 frames
# through a controller session, then empty FULL frames (nothing to decode), then an agent session
# (within its read budget), then the bare TLS baseline. rtt: 200 round trips. handshakes: 100, 8 at a time. idle (not in the default
# run): 100 sessions to a server process (more than its client loop's batch of 64), the server
# killed and restarted, all back.
bench ssntp-net/net "$LIMIT" -- throughput 2000 64
bench ssntp-net/net "$LIMIT" -- rtt 200
bench ssntp-net/net "$LIMIT" -- handshakes 100 8
bench ssntp-net/net "$LIMIT" -- idle 100

# scheduler/placement has no knob: 1,000,000 decisions in each of its five cases over 10,000
# nodes, about two minutes unoptimised (most of it the two cases that scan for room). Its limit
# is raised to match.
bench scheduler/placement 300
# scheduler/scale: c1m with 2,000 STARTs to 100 simulated agents (a child process) through the
# real cumulo-scheduler; fanin with 100 agents sending STATS, sampled for 1 s (after its fixed
# 5 s settling).
bench scheduler/scale "$LIMIT" -- c1m 2000 100
bench scheduler/scale "$LIMIT" -- fanin 100 1

# agent/scale: 50 instances started one at a time, held 1 s, then 50 at once.
bench agent/scale "$LIMIT" AGENT_BENCH_INSTANCES=50 AGENT_BENCH_SECS=1
# agent/over_ssntp: the cumulo-agent process under the real scheduler, 20 STARTs with each
# --change-report-gap, held 2 s.
bench agent/over_ssntp "$LIMIT" AGENT_BENCH_INSTANCES=20 AGENT_BENCH_SECS=2

# store benches have no count knob (10,000 instances each, created one transaction at a time).
# SQLite: seconds. etcd: about a minute unoptimised, so a longer limit.
bench store/store "$LIMIT"
if etcd_ok || [ -n "${ETCD_BENCH_ENDPOINT:-}" ]; then
    bench store/store_etcd 240
else
    etcd_missing store/store_etcd
fi

# controller/hostile_api: its three phases (quiet, login flood, slowloris) of 1 s each, with 2
# attacker addresses, 2 flooders and up to 16 held connections per address.
bench controller/hostile_api "$LIMIT" -- --seconds 1 --addresses 2 --flooders 2 --holders 16
# controller/image_data: three rounds of upload and download of an 8 MiB image.
bench controller/image_data "$LIMIT" -- --mib 8
# controller/dashboard: Chromium headless (scripts/deps.sh installs it), 200 instances, 3 rounds
# of each figure; without a browser it says it skips, unless CUMULO_REQUIRE_BROWSER=1 (exported
# by scripts/test.sh) makes that a failure.
bench controller/dashboard "$LIMIT" -- --instances 200 --rounds 3
# controller/load: the real cumulo-scheduler and cumulo-controller, 20 simulated agents, 200
# instances, 3 s of steady state sampled every second, STATS every second (so the agents'
# counts are fresh for the final check).
bench controller/load "$LIMIT" -- --agents 20 --instances 200 --seconds 3 --sample 1 \
    --stats-interval 1
# The same through the Compute API over an etcd store of its own (a launch's instances made
# several to a transaction, the agents' STATS applied side by side).
if etcd_ok; then
    bench controller/load "$LIMIT" -- --agents 20 --instances 200 --seconds 3 --sample 1 \
        --stats-interval 1 --api compute --store etcd
else
    etcd_missing controller/load
fi

# systest/api and systest/console have no count knob: api creates 1,000 servers through the API,
# fills the store to 10,000 and GETs 200 pages of 1,000 and 200 of 100 (two minutes and more
# unoptimised); console fetches 1,000 console logs (seconds).
bench systest/api 360
bench systest/console "$LIMIT"
# systest/image_fetch: three rounds of fetching an 8 MiB image into node caches.
bench systest/image_fetch "$LIMIT" -- --mib 8
# systest/remote: 20 starts per round through its own etcd with 1, 2 and 4 `cumulo-agent
# --remote` replicas (sim backend: no VM), then its three takeovers (default 1 s lease: a shorter
# one may lapse on a loaded machine before the SIGKILL it is meant to follow).
if etcd_ok; then
    bench systest/remote "$LIMIT" -- 20
else
    etcd_missing systest/remote
fi

took=$(( (${EPOCHREALTIME/./} - total_start) / 1000000 ))
echo
echo "bench smoke: ${passed} passed, ${#failed[@]} failed, ${#skipped[@]} skipped in ${took} s"
if [ ${#failed[@]} -gt 0 ]; then
    printf '  failed: %s\n' "${failed[@]}" >&2
    exit 1
fi
