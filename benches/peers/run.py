#!/usr/bin/env python3
"""Runs the peer comparison turn — one `shell` call that really runs `cat README.md`,
then a final answer — on the OpenAI Agents SDK, on rig and on Foya against one
`foya sim-server`, interleaved (SDK, rig, Foya, SDK, rig, Foya, … per session count),
and prints a Markdown table: every run, then per round Foya's turns/s over the SDK's
and over rig's.

Usage (from the repository root, after `cargo build --release -p foya`):

    python3 benches/peers/run.py [--foya target/release/foya] [--sessions 100,1000]
                                 [--rounds 2] [--peers sdk,rig] [--json results.json]

The SDK is installed into benches/peers/.venv from the package registry on first use
(`openai-agents`, pinned below); the rig program (benches/peers/rig_turn, its own Cargo
workspace) is built on first use with `cargo build --release --locked` into
benches/peers/rig_turn/target. Not part of CI's tests."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDK_PACKAGE = "openai-agents==0.24.0"
SIM_FLAGS = [
    "--steps-per-turn", "2",
    "--tool-calls-per-step", "1",
    "--tool-name", "shell",
    "--tool-args", '{"command": "cat README.md"}',
]


RIG_DIR = HERE / "rig_turn"
RIG_VERSION = "0.44"


def rig_binary() -> Path:
    """Builds benches/peers/rig_turn (niced: a benchmark's tool, not the product; after
    the first build cargo only checks that it is fresh) and returns the binary."""
    target = RIG_DIR / "target"
    subprocess.run(
        ["nice", "-n", "19", "cargo", "build", "--release", "--locked", "--quiet",
         "--target-dir", str(target)],
        cwd=RIG_DIR, check=True,
    )
    return target / "release" / "rig-turn"


def venv_python() -> Path:
    venv = HERE / ".venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", SDK_PACKAGE], check=True)
    return python


def start_sim_server(foya: Path) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen(
        [str(foya), "sim-server", *SIM_FLAGS], stdout=subprocess.PIPE, text=True
    )
    url = server.stdout.readline().strip()
    if not url.startswith("http://"):
        server.kill()
        raise SystemExit(f"sim-server did not print its address (got {url!r})")
    return server, url


def peer_row(driver: str, command: list[str], sessions: int, cwd: Path) -> dict:
    """Runs a peer program that prints sdk_turn.py's JSON line, and reads it."""
    out = subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    turns = max(r["turns_ok"], 1)
    return {
        "driver": driver,
        "sessions": sessions,
        "ok": r["turns_ok"],
        "failed": r["turns_failed"],
        "tools_run": r["tool_calls_run"],
        "turns_per_s": r["turns_ok"] / r["wall_s"],
        "cpu_ms_per_turn": (r["cpu_s"] + r["children_cpu_s"]) * 1e3 / turns,
        "own_cpu_ms_per_turn": r["cpu_s"] * 1e3 / turns,
        "children_cpu_ms_per_turn": r["children_cpu_s"] * 1e3 / turns,
        "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
        "errors": r["errors"],
    }


def run_sdk(python: Path, url: str, sessions: int, cwd: Path) -> dict:
    return peer_row(
        "OpenAI Agents SDK 0.24 (asyncio)",
        [str(python), str(HERE / "sdk_turn.py"), "--base-url", f"{url}/v1",
         "--sessions", str(sessions)],
        sessions, cwd,
    )


def run_rig(binary: Path, url: str, sessions: int, cwd: Path) -> dict:
    return peer_row(
        f"rig-core {RIG_VERSION} (tokio)",
        [str(binary), "--base-url", f"{url}/v1", "--sessions", str(sessions)],
        sessions, cwd,
    )


def run_foya(foya: Path, url: str, sessions: int, cwd: Path) -> dict:
    report = cwd / "foya-report.json"
    subprocess.run(
        [str(foya), "loadtest", "--sessions", str(sessions),
         "--scenario", str(HERE / "shell-turn.toml"),
         "--provider", "openai-chat", "--base-url", f"{url}/v1",
         "--json", str(report)],
        cwd=cwd, check=False, capture_output=True, text=True,
    )
    r = json.loads(report.read_text())
    report.unlink()
    turns = max(r["turns_completed"], 1)
    with_children = (r.get("cpu_us_per_turn_with_children") or 0) / 1e3
    return {
        "driver": "Foya loadtest (in process)",
        "sessions": sessions,
        "ok": r["turns_completed"],
        "failed": r["turns_failed"],
        "tools_run": r.get("tool_calls_run"),
        "turns_per_s": r["turns_per_s"],
        "cpu_ms_per_turn": with_children,
        "own_cpu_ms_per_turn": (r.get("cpu_us_per_turn") or 0) / 1e3,
        "children_cpu_ms_per_turn": r["children_cpu_s"] * 1e3 / turns,
        "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
        "errors": [],
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| sessions | round | driver | turns ok / failed | tools run | turns/s "
        "| CPU per turn (with children) | own | children | peak RSS | per session |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['sessions']} | {r['round']} | {r['driver']} | {r['ok']} / {r['failed']} "
            f"| {r['tools_run']} | {r['turns_per_s']:.0f} | {r['cpu_ms_per_turn']:.2f} ms "
            f"| {r['own_cpu_ms_per_turn']:.2f} ms | {r['children_cpu_ms_per_turn']:.2f} ms "
            f"| {r['peak_rss_mib']:.0f} MiB | {r['peak_rss_mib'] * 1024 / r['sessions']:.0f} KiB |"
        )
    return "\n".join(lines)


def ratios(rows: list[dict]) -> str:
    """One line per interleaved round: turns/s and CPU per turn (children included) of
    each contestant, and Foya's turns/s over each peer's."""
    rounds: dict[tuple[int, int], dict[str, dict]] = {}
    for r in rows:
        rounds.setdefault((r["sessions"], r["round"]), {})[r["contestant"]] = r
    peers = [name for name in PEER_NAMES if any(name in by for by in rounds.values())]
    head = ["sessions", "round", "Foya turns/s"]
    head += [f"{PEER_NAMES[p]} turns/s" for p in peers]
    head += [f"Foya / {PEER_NAMES[p]}" for p in peers]
    head += ["CPU per turn with children: Foya"] + [PEER_NAMES[p] for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (sessions, round_), by in sorted(rounds.items()):
        foya = by.get("foya")
        if foya is None:
            continue
        cells = [str(sessions), str(round_), f"{foya['turns_per_s']:.0f}"]
        cells += [f"{by[p]['turns_per_s']:.0f}" if p in by else "–" for p in peers]
        cells += [
            f"{foya['turns_per_s'] / by[p]['turns_per_s']:.2f}×"
            if p in by and by[p]["turns_per_s"] > 0 else "–"
            for p in peers
        ]
        cells += [f"{foya['cpu_ms_per_turn']:.2f} ms"]
        cells += [f"{by[p]['cpu_ms_per_turn']:.2f} ms" if p in by else "–" for p in peers]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


PEER_NAMES = {"sdk": "SDK", "rig": "rig"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--foya", default="target/release/foya")
    parser.add_argument("--sessions", default="100,1000")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--peers", default="sdk,rig",
        help="the peers to run beside Foya, in this order each round (sdk, rig)",
    )
    parser.add_argument("--json")
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEER_NAMES]
    if unknown:
        raise SystemExit(f"unknown peer(s) {unknown}: choose from {list(PEER_NAMES)}")
    foya = Path(args.foya).resolve()
    helper = foya.parent / "foya-sandbox"
    if not helper.exists():
        raise SystemExit(
            f"{helper} is missing: foya would re-execute itself as the sandbox helper of every "
            "shell call (the slower helper). Build both: "
            "cargo build --release -p foya -p foya-actors"
        )
    runs = []
    if "sdk" in peers:
        runs.append(("sdk", run_sdk, venv_python()))
    if "rig" in peers:
        runs.append(("rig", run_rig, rig_binary()))
    runs.append(("foya", run_foya, foya))
    server, url = start_sim_server(foya)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            cwd = Path(work)
            shutil.copy(HERE / "README.md", cwd / "README.md")
            for sessions in [int(s) for s in args.sessions.split(",")]:
                for round_ in range(1, args.rounds + 1):
                    for contestant, run, target in runs:
                        row = run(target, url, sessions, cwd)
                        row["contestant"] = contestant
                        row["round"] = round_
                        print(json.dumps(row), file=sys.stderr)
                        rows.append(row)
    finally:
        server.terminate()
        server.wait()
    print(table(rows))
    print()
    print(ratios(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    os.environ.pop("OPENAI_API_KEY", None)
    main()
