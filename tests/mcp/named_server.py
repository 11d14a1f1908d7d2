"""An MCP server (stdio, the official Python `mcp` package) whose tools are named by its
environment, to test how Foya names the tools of several servers.

$MCP_TOOLS: the tool names, comma-separated. Every tool takes no argument and answers
`$MCP_LABEL/<tool>` (the server's label, then the tool's own name), so a test sees which
server's which tool a call reached. A start is appended to $MCP_RECORD as `started`.
"""

import os

from mcp.server.fastmcp import FastMCP

LABEL = os.environ.get("MCP_LABEL", "named")
RECORD = os.environ.get("MCP_RECORD", os.devnull)
mcp = FastMCP(LABEL)


def answering(tool: str):
    def answer() -> str:
        return f"{LABEL}/{tool}"

    answer.__doc__ = f"Answers `{LABEL}/{tool}`."
    return answer


for name in filter(None, os.environ.get("MCP_TOOLS", "").split(",")):
    mcp.add_tool(answering(name), name=name)


if __name__ == "__main__":
    with open(RECORD, "a", encoding="utf-8") as f:
        f.write("started\n")
    mcp.run("stdio")
