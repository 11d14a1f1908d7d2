#!/usr/bin/env python3
"""Runs the peer comparison turn — one `shell` call that really runs `cat README.md`,
then a final answer — on the OpenAI Agents SDK and on Foya against one `foya sim-server`,
interleaved (SDK, Foya, SDK, Foya, … per session count), and prints a Markdown table.

Usage (from the repository root, after `cargo build --release -p foya`):

    python3 benches/peers/run.py [--foya target/release/foya] [--sessions 100,1000]
                                 [--rounds 2] [--json results.json]

The SDK is installed into benches/peers/.venv from the package registry on first use
(`openai-agents`, pinned below). Not part of CI's tests."""

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


def run_sdk(python: Path, url: str, sessions: int, cwd: Path) -> dict:
    out = subprocess.run(
        [str(python), str(HERE / "sdk_turn.py"), "--base-url", f"{url}/v1",
         "--sessions", str(sessions)],
        cwd=cwd, check=True, capture_output=True, text=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    turns = max(r["turns_ok"], 1)
    return {
        "driver": "OpenAI Agents SDK 0.24 (asyncio)",
        "sessions": sessions,
        "ok": r["turns_ok"],
        "failed": r["turns_failed"],
        "tools_run": r["tool_calls_run"],
        "turns_per_s": r["turns_ok"] / r["wall_s"],
        "cpu_ms_per_turn": (r["cpu_s"] + r["children_cpu_s"]) * 1e3 / turns,
        "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
        "errors": r["errors"],
    }


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
    return {
        "driver": "Foya loadtest (in process)",
        "sessions": sessions,
        "ok": r["turns_completed"],
        "failed": r["turns_failed"],
        "tools_run": r.get("tool_calls_run"),
        "turns_per_s": r["turns_per_s"],
        "cpu_ms_per_turn": (r.get("cpu_us_per_turn_with_children") or 0) / 1e3,
        "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
        "errors": [],
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| sessions | driver | turns ok / failed | tools run | turns/s | CPU per turn (with children) | peak RSS | per session |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['sessions']} | {r['driver']} | {r['ok']} / {r['failed']} | {r['tools_run']} "
            f"| {r['turns_per_s']:.0f} | {r['cpu_ms_per_turn']:.2f} ms "
            f"| {r['peak_rss_mib']:.0f} MiB | {r['peak_rss_mib'] * 1024 / r['sessions']:.0f} KiB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--foya", default="target/release/foya")
    parser.add_argument("--sessions", default="100,1000")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    foya = Path(args.foya).resolve()
    helper = foya.parent / "foya-sandbox"
    if not helper.exists():
        raise SystemExit(
            f"{helper} is missing: foya would re-execute itself as the sandbox helper of every "
            "shell call (the slower helper). Build both: "
            "cargo build --release -p foya -p foya-actors"
        )
    python = venv_python()
    server, url = start_sim_server(foya)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            cwd = Path(work)
            shutil.copy(HERE / "README.md", cwd / "README.md")
            for sessions in [int(s) for s in args.sessions.split(",")]:
                for _ in range(args.rounds):
                    for run in (run_sdk, run_foya):
                        target = python if run is run_sdk else foya
                        row = run(target, url, sessions, cwd)
                        print(json.dumps(row), file=sys.stderr)
                        rows.append(row)
    finally:
        server.terminate()
        server.wait()
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    os.environ.pop("OPENAI_API_KEY", None)
    main()
