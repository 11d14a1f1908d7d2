"""An MCP server (stdio, the official Python `mcp` package) that tells what environment it
was started with: the tool `getenv` answers one line per variable asked, `NAME=value`
or `NAME unset`. The tests show which of Foya's variables reach a tool server.
"""

import os

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("env")


@mcp.tool()
def getenv(names: str) -> str:
    """The values of the comma-separated variables `names`."""
    lines = []
    for name in names.split(","):
        value = os.environ.get(name)
        lines.append(f"{name} unset" if value is None else f"{name}={value}")
    return "\n".join(lines)


if __name__ == "__main__":
    mcp.run()
