#!/usr/bin/env bash
# Three `foya loadtest --store URL` processes at once on one PostgreSQL: the shared
# store's throughput and append latency with three writers (issue 42's benchmark, as a
# proxy for three `foya node`s until nodes own shards). Prints the aggregate events/s
# (every process's persisted events over the longest wall time) and each process's
# append p50/p99.
#
#   bash .ci/setup-postgres -- bash benches/pg-three-loadtests.sh [FOYA] [SESSIONS] [TURNS] [EXTRA...]
#
# FOYA: the binary (default target/release/foya); SESSIONS and TURNS per process
# (default 300 and 3); EXTRA: more loadtest flags (e.g. --durability immediate).
# The store: $FOYA_TEST_PG (each process writes to a schema of its own run, all in one
# server).
set -euo pipefail
foya=$(readlink -f "${1:-target/release/foya}")
sessions=${2:-300}
turns=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
: "${FOYA_TEST_PG:?set FOYA_TEST_PG (bash .ci/setup-postgres -- …)}"
psql_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -n -r | head -1)/psql
schema="foya_bench_$(date +%s)"
"$psql_bin" -q "$FOYA_TEST_PG" -c "CREATE SCHEMA $schema"
store="$FOYA_TEST_PG?options=-c%20search_path%3D$schema"
out=$(mktemp -d)
pids=()
for i in 1 2 3; do
  (cd "$out" && "$foya" loadtest --sessions "$sessions" --turns "$turns" --store "$store" \
     --json "$out/report-$i.json" "$@" >"$out/stdout-$i.txt" 2>"$out/stderr-$i.txt") &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
reports = [json.loads((out / f"report-{i}.json").read_text()) for i in (1, 2, 3)]
events = sum(r["events_persisted"] for r in reports)
wall = max(r["wall_s"] for r in reports)
print(f"3 processes: {events} events in {wall:.2f} s = {events / wall:.0f} events/s")
for i, r in enumerate(reports, 1):
    a = r["append_latency_ms"]
    print(f"  process {i}: {r['events_per_s']:.0f} events/s, turns {r['turns_completed']}, "
          f"append p50 {a['p50']:.2f} ms p99 {a['p99']:.2f} ms, errors {r['errors']}")
print("append p99 (worst process): %.2f ms" % max(r["append_latency_ms"]["p99"] for r in reports))
PY
exit $status
