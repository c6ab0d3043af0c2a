"""A real MCP server (the mcp SDK's MCPServer, stdio) whose one tool answers with N bytes.

For tests that a borrowed tool's answer, however large, reaches the child
cut to size instead of breaking its pipe's frame limit.
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("large-output")


@server.tool()
def blob(size: int) -> str:
    """Return ``size`` bytes of text, in lines of 99 ``x`` and a newline."""
    line = "x" * 99 + "\n"
    return (line * (size // 100 + 1))[:size]


if __name__ == "__main__":
    server.run("stdio")
