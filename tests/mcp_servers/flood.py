"""A small stdio MCP server (raw JSON-RPC, one message a line) for the hub's limits.

``blob(size)`` answers with one message holding ``size`` bytes of text, written
a MiB at a time, so the server never holds it whole. ``echo(text)`` answers
``text``. ``where()`` answers, as JSON, the directory it runs in and the file
it runs from (where a server starts, S-SEC-3). Each command-line argument
lists one more tool by that name (which answers its own name): a name listed
twice, or one holding ``__``.
"""

import json
import os
import sys

out = sys.stdout.buffer
EXTRA = sys.argv[1:]
SCHEMA = {"type": "object", "properties": {"size": {"type": "integer"}, "text": {"type": "string"}}}


def send(message: dict[str, object]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def answer(ident: object, text: str) -> None:
    send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}})


def blob(ident: object, size: int) -> None:
    head, tail = json.dumps(
        {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "@"}]}}
    ).split("@")
    out.write(head.encode())
    mib = b"x" * (1 << 20)
    for _ in range(size >> 20):
        out.write(mib)
    out.write(b"x" * (size & ((1 << 20) - 1)) + tail.encode() + b"\n")
    out.flush()


for line in sys.stdin.buffer:
    message = json.loads(line)
    ident, method = message.get("id"), message.get("method")
    params = message.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "flood", "version": "1"},
        }
        send({"jsonrpc": "2.0", "id": ident, "result": result})
    elif method == "tools/list":
        names = ["blob", "echo", "where", *EXTRA]
        tools = [{"name": n, "description": n, "inputSchema": SCHEMA} for n in names]
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools}})
    elif method == "tools/call":
        name, arguments = params["name"], params.get("arguments") or {}
        if name == "blob":
            blob(ident, int(arguments["size"]))
        elif name == "echo":
            answer(ident, str(arguments.get("text", "")))
        elif name == "where":
            answer(ident, json.dumps({"cwd": os.getcwd(), "file": os.path.abspath(__file__)}))
        else:
            answer(ident, name)
    elif ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
