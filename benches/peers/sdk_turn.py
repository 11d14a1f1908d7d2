"""The peer comparison turn on the OpenAI Agents SDK: N sessions at once in one asyncio
process, each one streamed run of an agent with a `shell` tool that really runs its
command. Prints one JSON line: turns, wall, CPU (own and children) and peak RSS."""

import argparse
import asyncio
import json
import resource
import time

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI


@function_tool
async def shell(command: str) -> str:
    """Run a shell command in the working directory and return its output."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return out.decode(errors="replace")


async def one_turn(agent: Agent, index: int) -> tuple[bool, int]:
    result = Runner.run_streamed(agent, f"session {index}: read the README")
    tool_calls = 0
    async for event in result.stream_events():
        if event.type == "run_item_stream_event" and event.name == "tool_output":
            tool_calls += 1
    return bool(result.final_output), tool_calls


async def main(base_url: str, sessions: int) -> dict:
    set_tracing_disabled(True)
    client = AsyncOpenAI(
        base_url=base_url,
        api_key="sk-sim-not-a-key",
        timeout=120,
        max_retries=0,
    )
    agent = Agent(
        name="peer",
        instructions="You are a coding agent. Use the shell tool to read files.",
        tools=[shell],
        model=OpenAIChatCompletionsModel(model="sim-1", openai_client=client),
    )
    start_self = resource.getrusage(resource.RUSAGE_SELF)
    start_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    results = await asyncio.gather(
        *(one_turn(agent, i) for i in range(sessions)), return_exceptions=True
    )
    wall = time.perf_counter() - started
    end_self = resource.getrusage(resource.RUSAGE_SELF)
    end_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    ok = [r for r in results if isinstance(r, tuple) and r[0]]
    errors = [repr(r) for r in results if isinstance(r, BaseException)][:3]

    def cpu(a, b):
        return (b.ru_utime - a.ru_utime) + (b.ru_stime - a.ru_stime)

    return {
        "driver": "openai-agents",
        "sessions": sessions,
        "turns_ok": len(ok),
        "turns_failed": sessions - len(ok),
        "tool_calls_run": sum(r[1] for r in ok),
        "wall_s": wall,
        "cpu_s": cpu(start_self, end_self),
        "children_cpu_s": cpu(start_children, end_children),
        "peak_rss_bytes": end_self.ru_maxrss * 1024,
        "errors": errors,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--sessions", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.base_url, args.sessions))))
