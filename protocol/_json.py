"""JSON a model wrote, as a worker hands it to its supervisor: bounded in maps and arrays.

A tool's input crosses the pipe three ways: in a ``tool.started`` event, in a
``permission.check`` (the supervisor matches its rules against it), and as a
borrowed MCP call's ``arguments`` (the supervisor forwards them to the MCP
server). Each is a ``BoundedJsonObject``, as are a workflow ask's JSON schema
and a ``progress`` frame's data; an echo's value is a ``BoundedJsonValue``.

Invariants:

- What one such value costs the supervisor is bounded (S-SEC-8): it holds at
  most ``MAX_JSON_CONTAINERS`` maps and arrays, else it is invalid, and a
  frame carrying it a protocol violation that ends that worker, after at
  most that many are walked. Bytes are cheap; containers are what cost
  Python work (an empty list is one byte on the wire), and the frame's own
  limit (``FrameLimits.max_containers``) is fifty times this.
- Strings and numbers are not counted: a 1 MB ``content`` or a map of a few
  hundred keys is one container.
- The value is checked in one walk (keys are strings, leaves are JSON
  scalars) and kept as decoded, never rebuilt.
- An honest worker never sends a violation: it builds the same models from
  its model's output first, so an input past the bound is refused there, as
  a tool error its model reads (or, for an event, replaced by a note of its
  size: ``event_input``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import JsonValue, PlainValidator

__all__ = [
    "MAX_JSON_CONTAINERS",
    "BoundedJsonObject",
    "BoundedJsonValue",
    "JsonObject",
    "json_containers",
]

#: A JSON object as the model wrote it: a tool's input, an MCP call's arguments.
JsonObject = dict[str, JsonValue]

#: Maps and arrays one tool input may hold (S-SEC-8); a real one has a handful.
MAX_JSON_CONTAINERS = 1024


def json_containers(value: Any, limit: int) -> int:
    """The maps and arrays in the JSON value ``value``, counted up to ``limit + 1``.

    Stops at ``limit + 1``, so the walk costs at most that many containers
    (and their items). Raises ``ValueError`` for what is not JSON (a key that
    is not a str, bytes, any other type).
    """
    count = 0
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind in _JSON_SCALARS:
            continue
        if kind is dict or (kind not in _JSON_ARRAYS and isinstance(item, dict)):
            for key in item:
                if type(key) is not str:
                    raise ValueError(f"a JSON object's key must be a str, not {type(key).__name__}")
            children: Any = item.values()
        elif kind in _JSON_ARRAYS or isinstance(item, _JSON_ARRAYS):
            children = item
        elif isinstance(item, _JSON_SCALAR_BASES):
            continue
        else:
            raise ValueError(f"{kind.__name__} is not a JSON value")
        count += 1
        if count > limit:
            return count
        extend(children)
    return count


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
_JSON_SCALAR_BASES = (str, int, float)
_JSON_ARRAYS = (list, tuple)


def _bounded_json(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, not {type(value).__name__}")
    return _bounded_json_value(value)  # type: ignore[no-any-return]


def _bounded_json_value(value: Any) -> Any:
    if json_containers(value, MAX_JSON_CONTAINERS) > MAX_JSON_CONTAINERS:
        raise ValueError(
            f"holds more than MAX_JSON_CONTAINERS ({MAX_JSON_CONTAINERS}) JSON maps and "
            "arrays; write it with fewer lists and objects"
        )
    return value


#: A JSON object a model wrote, as a worker sends it: at most
#: ``MAX_JSON_CONTAINERS`` maps and arrays, kept as decoded.
BoundedJsonObject = Annotated[
    dict[str, Any], PlainValidator(_bounded_json, json_schema_input_type=JsonObject)
]

#: Any JSON value a worker sends, bounded as ``BoundedJsonObject`` is.
BoundedJsonValue = Annotated[
    Any, PlainValidator(_bounded_json_value, json_schema_input_type=JsonValue)
]
