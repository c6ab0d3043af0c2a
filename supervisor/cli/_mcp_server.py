"""``McpFrontDoor``: subvisor's subagents as an MCP server (S-SRV-1..5).

One ``Subvisor`` serves every connection; each connection gets an
``McpSeat`` (its own root session) on its first request, and loses it, with
every agent still running in it, when it closes. Built on the ``mcp`` SDK's
low-level ``Server``; stdio and streamable HTTP carry it (``_mcp_command``).

The server speaks the handshake era of MCP (2025-11-25 and older, what every
client in use speaks): agents ask their client through server-to-client
requests (elicitation) and report through standalone notifications, which the
2026-07-28 per-request era forbids. A probe for that era (``server/discover``)
is refused, so a client that offers both falls back to the handshake.

Not offered, because the SDK (2.3) does not: the 2025-11-25 tasks utility
(``tasks/*`` are deliberately absent from its method tables, client and
server); background agents use the notification path instead (S-SRV-2).

Races handled:

- A connection's first two requests may arrive together: the seat is made
  synchronously, with no checkpoint between looking and storing.
- A background agent may end between its launch reply and the client's
  ``TaskOutput``: its notification is queued exactly once by the run
  (S-NOTE-3), and ``TaskOutput`` reads the stored record either way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

import trio
from mcp import types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from ..delegation._subvisor import Subvisor
from ..policy._approvals import ApprovalOrigin
from ..profiles._profile_catalog import ProfileCatalog
from ._mcp_asks import ElicitedAsks
from ._mcp_sampling import ClientSampling
from ._mcp_seat import McpSeat, new_seat_session_id

__all__ = [
    "SERVER_NAME",
    "TRANSCRIPT_TEMPLATE",
    "USAGE_URI",
    "ClientLink",
    "McpFrontDoor",
]

SERVER_NAME: Final = "subvisor"
USAGE_URI: Final = "subvisor://usage"
TRANSCRIPT_TEMPLATE: Final = "subvisor://agents/{agentId}/transcript"
_TRANSCRIPT_URI = re.compile(r"^subvisor://agents/(?P<agent>[^/]+)/transcript$")
#: MCP's "resource not found" error code.
_RESOURCE_NOT_FOUND: Final = -32002
_SEAT_KEY: Final = "subvisor.seat"

_INSTRUCTIONS = (
    "subvisor runs each subagent in its own sandboxed, capped worker process. Call Agent "
    "with a self-contained prompt; several Agent calls at once run concurrently. With "
    "run_in_background the call returns at once with the agentId, and a logging "
    "notification (logger 'subvisor') carries the <task-notification> when it ends; "
    "TaskOutput returns the same text. SendMessage steers or resumes an agent."
)

#: RFC 5424 severities, as MCP's logging levels order them.
_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def _connection_of(session: ServerSession) -> Connection:
    """The connection a request arrived on.

    The SDK's runner hands handlers the request's ``ServerSession`` only (its
    ``Context``, which exposes ``connection``, is not built by the runner in
    2.3); the connection's ``state`` and ``exit_stack`` are where the SDK says
    per-connection state and teardown belong.
    """
    connection: Connection = session._connection
    return connection


class ClientLink:
    """A seat's way to its client: notifications, elicitation, resource updates."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        #: The in-flight tools/call of each foreground Agent call, by its tool-use id:
        #: its agents' asks ride that request (on HTTP, its response stream).
        self.requests: dict[str, tuple[ServerSession, types.RequestId]] = {}
        self.subscriptions: set[str] = set()
        self.level: types.LoggingLevel = "info"

    @property
    def can_elicit(self) -> bool:
        """Whether the client declared elicitation."""
        wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
        return self._connection.check_capability(wanted)

    async def elicit(
        self, origin: ApprovalOrigin, message: str, schema: dict[str, Any]
    ) -> tuple[str, dict[str, Any] | None]:
        """Ask by form: on the launching request when it is in flight, else standalone."""
        params = types.ElicitRequestFormParams(message=message, requested_schema=schema)
        request = self.requests.get(origin.parent_tool_call_id or "")
        if request is not None:
            session, request_id = request
            result = await session.elicit_form(message, schema, related_request_id=request_id)
        else:
            result = await self._connection.send_request(types.ElicitRequest(params=params))
        content = dict(result.content) if result.content is not None else None
        return result.action, content

    def can_sample(self) -> bool:
        """Whether the client declared sampling with tools (``--model mcp-sampling``)."""
        wanted = types.ClientCapabilities(
            sampling=types.SamplingCapability(tools=types.SamplingToolsCapability())
        )
        return self._connection.check_capability(wanted)

    async def sample(self, params: types.CreateMessageRequestParams) -> BaseModel:
        """One ``sampling/createMessage`` on the client's standalone channel; its result."""
        return await self._connection.send_request(
            types.CreateMessageRequest(params=params),
            result_type=types.CreateMessageResultWithTools,
        )

    async def log(self, level: types.LoggingLevel, text: str) -> None:
        """One ``notifications/message`` from logger ``subvisor``, if the client wants it."""
        if _LEVELS.index(level) < _LEVELS.index(self.level):
            return
        await self._connection.notify(
            "notifications/message", {"level": level, "logger": SERVER_NAME, "data": text}
        )

    async def notify(self, text: str) -> None:
        """A completion notification (S-SRV-2)."""
        await self.log("info", text)

    async def warn(self, text: str) -> None:
        """Something the client should know went wrong."""
        await self.log("warning", text)

    async def resource_updated(self, uri: str) -> None:
        """Tell a subscribed client that ``uri`` changed."""
        if uri in self.subscriptions:
            await self._connection.send_resource_updated(uri)


class McpFrontDoor:
    """The MCP server: one ``Subvisor``, one seat per client connection."""

    def __init__(
        self,
        host: Subvisor,
        asks: ElicitedAsks,
        *,
        model: str,
        cwd: Path,
        nursery: trio.Nursery,
        sampling: ClientSampling | None = None,
        version: str = "",
    ) -> None:
        #: What each seat is built on (``McpSeat`` takes its parts from it).
        self._host = host
        self._store = host.store
        self._registry = host.registry
        self._lifecycle = host.lifecycle
        self.asks = asks
        self.model = model
        #: Each seat's agents run on its client's model (``--model mcp-sampling``).
        self.sampling = sampling
        self.cwd = cwd
        self._nursery = nursery
        self._catalog = ProfileCatalog.discover(
            cwd, home=host.home, plugin_dirs=host.settings.plugin_dirs, hidden=host.homes
        )
        self.seats: dict[str, McpSeat] = {}
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=version,
            instructions=_INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
        )
        self.server.add_request_handler("server/discover", types.RequestParams, self._no_discover)
        # Advertises logging: completion notifications are log messages (S-SRV-2).
        self.server.add_request_handler(
            "logging/setLevel", types.SetLevelRequestParams, self._set_level
        )

    # -- seats -----------------------------------------------------------------------

    def _seat(self, ctx: ServerRequestContext[Any, Any]) -> tuple[McpSeat, ClientLink]:
        """The seat of the request's connection, made on its first request."""
        connection = _connection_of(ctx.session)
        found = connection.state.get(_SEAT_KEY)
        if found is not None:
            seat, link = found
            return seat, link
        client = connection.client_params.client_info.name if connection.client_params else None
        session_id = new_seat_session_id()
        seat = McpSeat(
            self._host,
            session_id=session_id,
            model=self.model if self.sampling is None else self.sampling.model_for(session_id),
            cwd=self.cwd,
            catalog=self._catalog,
            label=f"MCP client {client or '(unnamed)'}",
        )
        link = ClientLink(connection)
        if self.sampling is not None:
            self.sampling.attach(seat.session_id, (link.can_sample, link.sample))
        connection.state[_SEAT_KEY] = (seat, link)
        self.seats[seat.session_id] = seat
        self.asks.attach(seat.session_id, link)
        connection.exit_stack.push_async_callback(self._close_seat, seat)
        self._nursery.start_soon(seat.pump_notifications, link)
        self._nursery.start_soon(self._watch_transcripts, seat, link)
        return seat, link

    async def _close_seat(self, seat: McpSeat) -> None:
        self.asks.detach(seat.session_id)
        if self.sampling is not None:
            self.sampling.detach(seat.session_id)
        self.seats.pop(seat.session_id, None)
        await seat.close()

    async def close(self) -> None:
        """Close every seat (the server is going away)."""
        for seat in list(self.seats.values()):
            await self._close_seat(seat)

    async def _watch_transcripts(self, seat: McpSeat, link: ClientLink) -> None:
        """Resource updates for subscribed transcripts, as their agents' messages arrive."""
        with self._lifecycle.subscribe() as events:
            async with seat.until_closed():
                async for event in events:
                    if event["session_id"] == seat.session_id and event["event"] in (
                        "message.appended",
                        "task.ended",
                    ):
                        await link.resource_updated(_transcript_uri(event["agentId"]))
                        if event["event"] == "task.ended":
                            await link.resource_updated(USAGE_URI)

    # -- handlers --------------------------------------------------------------------

    async def _no_discover(
        self, ctx: ServerRequestContext[Any, Any], params: types.RequestParams
    ) -> types.EmptyResult:
        raise MCPError(
            code=types.METHOD_NOT_FOUND,
            message="subvisor serves the MCP handshake era (initialize); it asks its client "
            "through elicitation, which the per-request era does not allow",
        )

    async def _set_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        _, link = self._seat(ctx)
        link.level = params.level
        return types.EmptyResult()

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        seat, _ = self._seat(ctx)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=spec.name, description=spec.description, input_schema=spec.input_schema
                )
                for spec in seat.specs
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        seat, link = self._seat(ctx)
        session, request_id = ctx.session, ctx.request_id

        async def report(step: int, message: str) -> None:
            # A no-op unless the client sent a progress token.
            await session.report_progress(step, None, message)

        call_id = seat.new_call_id()
        if request_id is not None:
            link.requests[call_id] = (session, request_id)
        try:
            output = await seat.call(params.name, params.arguments or {}, report, call_id=call_id)
        finally:
            link.requests.pop(call_id, None)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=output.text)], is_error=output.is_error
        )

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        seat, _ = self._seat(ctx)
        resources = [
            types.Resource(
                uri=USAGE_URI,
                name="usage",
                description="Usage of this session's subagents, summed (tokens, calls, time)",
                mime_type="application/json",
            )
        ]
        for record in self._registry.list(seat.session_id):
            if record.kind == "local_agent":
                resources.append(
                    types.Resource(
                        uri=_transcript_uri(record.task_id),
                        name=f"{record.task_id} transcript",
                        description=f"{record.description} ({record.status})",
                        mime_type="application/json",
                    )
                )
        return types.ListResourcesResult(resources=resources)

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=TRANSCRIPT_TEMPLATE,
                    name="agent transcript",
                    description="A subagent's messages so far (one of this session's agents)",
                    mime_type="application/json",
                )
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        seat, _ = self._seat(ctx)
        uri = str(params.uri)
        body = self._resource_body(seat, uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=body)]
        )

    def _resource_body(self, seat: McpSeat, uri: str) -> str:
        if uri == USAGE_URI:
            return json.dumps(self._store.usage_rollup(seat.session_id).summary(), indent=2)
        match = _TRANSCRIPT_URI.match(uri)
        record = seat.record(match["agent"]) if match else None
        if record is None or record.child_session_id is None:
            raise MCPError(
                code=_RESOURCE_NOT_FOUND,
                message=f"no resource {uri!r} in this session: resources are {USAGE_URI} and "
                f"{TRANSCRIPT_TEMPLATE} for this session's agents",
            )
        messages = self._store.messages(record.child_session_id)
        return json.dumps(
            {
                "agentId": record.task_id,
                "status": record.status,
                "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in messages],
            },
            indent=2,
        )

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        seat, link = self._seat(ctx)
        uri = str(params.uri)
        self._resource_body(seat, uri)  # it must exist, and be this session's
        link.subscriptions.add(uri)
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        _, link = self._seat(ctx)
        link.subscriptions.discard(str(params.uri))
        return types.EmptyResult()


def _transcript_uri(agent_id: str) -> str:
    return TRANSCRIPT_TEMPLATE.replace("{agentId}", agent_id)
