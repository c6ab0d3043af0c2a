"""A real MCP server (the mcp SDK's MCPServer) whose one tool answers with N bytes.

For tests that a borrowed tool's answer, however large, reaches the child
cut to size instead of breaking its pipe's frame limit. Over stdio, or with
``http PORT`` over streamable HTTP on 127.0.0.1, answering in JSON (not SSE).
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("large-output")


@server.tool()
def blob(size: int) -> str:
    """Return ``size`` bytes of text, in lines of 99 ``x`` and a newline."""
    line = "x" * 99 + "\n"
    return (line * (size // 100 + 1))[:size]


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", port=int(sys.argv[2]), json_response=True)
    else:
        server.run("stdio")
