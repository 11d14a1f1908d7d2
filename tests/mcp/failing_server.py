"""An MCP server (stdio, the official Python `mcp` package) whose tools fail in the ways
Foya's MCP client must survive: a crash mid-call, a hang past the timeout, an error
result, a huge result, an image result, an oversized (17 MB) answer, a tool list that changes, progress.

Every call and every cancellation is appended to $MCP_RECORD (one line each), so a test
can see what reached the server: `started PID`, `call NAME`, `cancelled NAME` (the
call's task was cancelled), `notified cancelled REASON` (a `notifications/cancelled`
arrived from the client).
"""

import asyncio
import base64
import os
import sys

import anyio
from mcp.server.fastmcp import Context, FastMCP, Image
from mcp.server.stdio import stdio_server

RECORD = os.environ.get("MCP_RECORD", os.devnull)
mcp = FastMCP("failing")

# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def record(line: str) -> None:
    with open(RECORD, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@mcp.tool()
def ok(text: str) -> str:
    """Answers with the text it was given."""
    record("call ok")
    return f"ok: {text}"


@mcp.tool()
def crash() -> str:
    """Exits the server process in the middle of the call."""
    record("call crash")
    sys.stdout.flush()
    os._exit(3)


@mcp.tool()
async def hang(ctx: Context) -> str:
    """Never answers (until cancelled)."""
    record("call hang")
    try:
        await ctx.report_progress(1, 10, "waiting")
        await asyncio.sleep(3600)
    except BaseException:
        record("cancelled hang")
        raise
    return "never"


@mcp.tool()
def write(path: str) -> str:
    """Writes a file (to see the server's sandbox)."""
    record("call write")
    with open(path, "w", encoding="utf-8") as f:
        f.write("written")
    return f"wrote {path}"


@mcp.tool()
def garbage() -> str:
    """Writes lines that are not JSON-RPC to stdout and floods stderr, then answers."""
    record("call garbage")
    os.write(1, b'this is not JSON-RPC\n{"jsonrpc": "2.0", "method": 5}\n')
    os.write(2, b"flood " * 200_000 + b"\n")
    for _ in range(2_000):
        os.write(2, b"x" * 1_000 + b"\n")
    return "survived"


@mcp.tool()
def fail() -> str:
    """Answers with an error result."""
    record("call fail")
    raise ValueError("the tool failed on purpose")


@mcp.tool()
def huge() -> str:
    """Answers with 200 000 characters."""
    record("call huge")
    return "start-" + "x" * 200_000 + "-end"


@mcp.tool()
def image() -> Image:
    """Answers with a PNG image."""
    record("call image")
    return Image(data=PIXEL, format="png")


@mcp.tool()
def oversized() -> Image:
    """Answers with a 13 MB image: one message of about 17 MB, over rmcp's 16 MiB line."""
    record("call oversized")
    return Image(data=PIXEL + b"\0" * 13_000_000, format="png")


def added(text: str) -> str:
    """A tool that exists only after add_tool was called."""
    record("call added")
    return f"added: {text}"


@mcp.tool()
async def add_tool(ctx: Context) -> str:
    """Adds the tool `added` and tells the client (tools/list_changed)."""
    record("call add_tool")
    mcp.add_tool(added)
    await ctx.session.send_tool_list_changed()
    return "added the tool `added`"


async def main() -> None:
    """FastMCP's stdio loop, with the client's messages seen on their way in."""
    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream(100)

        async def forward() -> None:
            async with send:
                async for message in read_stream:
                    root = getattr(getattr(message, "message", None), "root", None)
                    if getattr(root, "method", None) == "notifications/cancelled":
                        params = getattr(root, "params", None) or {}
                        record(f"notified cancelled {params.get('reason')}")
                    await send.send(message)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(forward)
            server = mcp._mcp_server
            await server.run(receive, write_stream, server.create_initialization_options())
            tasks.cancel_scope.cancel()


if __name__ == "__main__":
    record(f"started {os.getpid()}")
    anyio.run(main)
