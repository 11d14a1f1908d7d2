#!/usr/bin/env bash
# Issue 42's benchmark: three `foya node`s on one PostgreSQL, driven over HTTP by
# `foya loadtest --through` (sessions created round-robin on the nodes, each turn's input
# posted and its events read from the session's SSE stream). The nodes run the simulated
# model in process (`--provider sim`: 3 steps, two `read_file` calls a turn).
#
#   bash .ci/setup-postgres -- bash benches/three-nodes.sh [FOYA] [SESSIONS] [TURNS] [LOADTEST FLAGS...]
#
# FOYA: the binary of the driver and the nodes (default target/release/foya; NODE_FOYA
# for another binary for the nodes); SESSIONS and TURNS of the whole run (default 1800
# and 3); further flags go to `foya loadtest` (e.g. --concurrency 30, --route forwarded).
# NODES: how many nodes (default 3). SYNC=off: the nodes' store URL sets
# `synchronous_commit=off` (what `foya loadtest --store --durability none` does); default:
# the server's setting (on, from .ci/setup-postgres).
#
# Prints the driver's report (events committed by the nodes over the wall time, the
# append latency from the nodes' own /metrics histograms), then the rows of foya_events
# over the same wall time, the CPU each process used during the run (nodes, PostgreSQL,
# driver) and the load average before and during it. The store: a fresh schema in
# $FOYA_TEST_PG.
set -euo pipefail
foya=$(readlink -f "${1:-target/release/foya}")
node_foya=$(readlink -f "${NODE_FOYA:-$foya}")
sessions=${2:-1800}
turns=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
nodes=${NODES:-3}
: "${FOYA_TEST_PG:?set FOYA_TEST_PG (bash .ci/setup-postgres -- …)}"
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -n -r | head -1)
psql() { "$pg_bin/psql" -qtAX "$FOYA_TEST_PG" "$@"; }
schema="foya_bench_$(date +%s%N)"
psql -c "CREATE SCHEMA $schema"
store="$FOYA_TEST_PG?options=-c%20search_path%3D$schema"
if [ "${SYNC:-}" = off ]; then
  store="$store%20-c%20synchronous_commit%3Doff"
fi
in_schema() { psql -c "SET search_path = $schema" -c "$1"; }
out=$(mktemp -d)
echo "bench-cookie" > "$out/cookie"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pids=()
sampler=
stop_all() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT

urls=()
for i in $(seq 1 "$nodes"); do
  (cd "$out" && exec "$node_foya" node --name "n$i" --listen "127.0.0.1:$(free_port)" \
     --cookie-file "$out/cookie" --http 127.0.0.1:0 --store "$store" --provider sim \
     --data-dir "$out/n$i" >"$out/n$i.out" 2>"$out/n$i.err") &
  pids+=($!)
  until grep -q "HTTP API at" "$out/n$i.err" 2>/dev/null; do
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$out/n$i.err" >&2; exit 1; }
    sleep 0.1
  done
  urls+=("$(sed -n 's/^foya node: HTTP API at //p' "$out/n$i.err" | head -1)")
done

# Placement settled: every shard held by a live lease, every node holding some, and the
# same shares for 2 s (no handoff left to cancel a turn of the run).
held_query="SELECT string_agg(node || '=' || c, ' ' ORDER BY node) FROM (SELECT n.node, count(*) c
  FROM foya_shards sh JOIN foya_nodes n ON n.lease = sh.owner_lease
  WHERE n.expires_at > clock_timestamp() GROUP BY n.node) t"
total=$(in_schema "SELECT count(*) FROM foya_shards")
last="" stable=0
for _ in $(seq 1 600); do
  held=$(in_schema "$held_query")
  sum=0 owners=0
  for part in $held; do sum=$(( sum + ${part#*=} )); owners=$(( owners + 1 )); done
  if [ "$sum" = "$total" ] && [ "$owners" = "$nodes" ] && [ "$held" = "$last" ]; then
    stable=$(( stable + 1 ))
    [ "$stable" -ge 10 ] && break
  else
    stable=0
  fi
  last=$held
  sleep 0.2
done
[ "$stable" -ge 10 ] || { echo "placement did not settle: $held" >&2; exit 1; }
echo "nodes: ${urls[*]} (shards: $held)"

# CPU seconds (user + system) of a process and, for PostgreSQL, of the postmaster and
# its children (the backends, the WAL writer, …).
hz=$(getconf CLK_TCK)
cpu_of() { awk -v hz="$hz" '{ split($0, a, ") "); split(a[2], f, " "); printf "%.2f", (f[12] + f[13]) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0; }
postmaster=$(head -1 "$(psql -c 'SHOW data_directory')/postmaster.pid" 2>/dev/null || true)
pg_cpu() {
  local total=0 p
  for p in $postmaster $(ps -o pid= --ppid "$postmaster" 2>/dev/null); do
    total=$(awk -v a="$total" -v b="$(cpu_of "$p")" 'BEGIN { printf "%.2f", a + b }')
  done
  echo "$total"
}
node_cpu() { local p; for p in "${pids[@]}"; do
  # The node is the subshell's exec'd process: the pid itself.
  printf "%s " "$(cpu_of "$p")"; done; }

echo "load before: $(uptime)"
(while sleep 2; do echo "load during: $(uptime)"; done) > "$out/load.txt" &
sampler=$!
nodes_before=$(node_cpu)
pg_before=$(pg_cpu)
urls_csv=$(IFS=,; echo "${urls[*]}")
status=0
(cd "$out" && "$foya" loadtest --through "$urls_csv" --sessions "$sessions" --turns "$turns" \
   --json "$out/report.json" "$@") || status=$?
nodes_after=$(node_cpu)
pg_after=$(pg_cpu)
kill "$sampler" 2>/dev/null || true
sampler=
cat "$out/load.txt"
rows=$(in_schema "SELECT count(*) FROM foya_events")
python3 - "$out/report.json" "$rows" "$nodes_before" "$nodes_after" "$pg_before" "$pg_after" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
rows = int(sys.argv[2])
wall = report["wall_s"]
print(f"foya_events rows: {rows} in {wall:.2f} s = {rows / wall:.0f} events/s "
      f"(driver: {report['events_committed']} committed, {report['events_received']} received)")
before = [float(x) for x in sys.argv[3].split()]
after = [float(x) for x in sys.argv[4].split()]
nodes = [a - b for a, b in zip(after, before)]
pg = float(sys.argv[6]) - float(sys.argv[5])
driver = report["driver_cpu_s"]
total = sum(nodes) + pg + driver
print("cpu during the run (s): nodes " + " + ".join(f"{n:.2f}" for n in nodes)
      + f" = {sum(nodes):.2f}, postgresql {pg:.2f}, driver {driver:.2f}; "
      f"total {total:.2f} of {2 * wall:.2f} (2 cores x wall)")
a = report["append_latency_ms"]
b = report.get("append_p99_bucket_ms") or {}
print(f"append p50 {a['p50']:.2f} ms p99 {a['p99']:.2f} ms "
      f"(p99 bucket ({b.get('lower_ms', 0):.1f}, {b.get('upper_ms', 0):.1f}] ms)")
PY
exit $status
