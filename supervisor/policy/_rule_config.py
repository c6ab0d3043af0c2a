"""Permission rules from config: opencode's ``permission`` map and ``tools`` switches.

Every malformed key or value is a :class:`PermissionConfigError` that names
it; nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._rules import ACTIONS, Action, PermissionConfigError, PermissionRule, Ruleset
from ._tool_permissions import expand_home, permission_name

__all__ = ["rules_from_config", "tools_map_to_rules"]


def _action(value: object, where: str) -> Action:
    for action in ACTIONS:
        if value == action:
            return action
    raise PermissionConfigError(
        f"{where}: action must be one of {', '.join(ACTIONS)}, got {value!r}"
    )


def _key(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise PermissionConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _rule_from_item(item: object, index: int, home: str | None) -> PermissionRule:
    if isinstance(item, PermissionRule):
        return item
    where = f"permission rule #{index}"
    if not isinstance(item, Mapping):
        raise PermissionConfigError(
            f"{where}: expected a mapping with permission, pattern and action, got {item!r}"
        )
    unknown = set(item) - {"permission", "pattern", "action"}
    if unknown:
        raise PermissionConfigError(f"{where}: unknown keys {sorted(map(str, unknown))}")
    for required in ("permission", "action"):
        if required not in item:
            raise PermissionConfigError(f"{where}: missing {required!r} in {dict(item)!r}")
    permission = permission_name(_key(item["permission"], f"{where} permission"))
    pattern = expand_home(_key(item.get("pattern", "*"), f"{where} pattern"), home)
    return PermissionRule(permission, pattern, _action(item["action"], f"{where} action"))


def rules_from_config(config: object, *, home: str | None = None) -> Ruleset:
    """The rules an opencode ``permission`` config describes, in its order.

    Accepted shapes:

    - ``"allow"``: one action for everything (``*`` on ``*``);
    - ``{"edit": "deny", "*": "ask"}``: an action per permission, pattern ``*``;
    - ``{"bash": {"*": "ask", "git *": "allow"}}``: actions per pattern;
    - ``[{"permission": "bash", "pattern": "git *", "action": "allow"}, ...]``
      (``pattern`` defaults to ``*``).

    Keys go through :func:`permission_name` (``Write`` and ``write`` are
    ``edit``); patterns starting with ``~`` or ``$HOME`` are expanded with
    ``home`` (default: the user's). Anything else raises
    :class:`PermissionConfigError` naming the key and the bad value.
    """
    if config is None:
        return ()
    if isinstance(config, str):
        return (PermissionRule("*", "*", _action(config, "permission")),)
    if isinstance(config, Mapping):
        rules: list[PermissionRule] = []
        for raw_key, value in config.items():
            key = _key(raw_key, f"permission key {raw_key!r}")
            permission = permission_name(key)
            if isinstance(value, str):
                rules.append(PermissionRule(permission, "*", _action(value, f"permission {key!r}")))
            elif isinstance(value, Mapping):
                for raw_pattern, action in value.items():
                    where = f"permission {key!r} pattern {raw_pattern!r}"
                    pattern = expand_home(_key(raw_pattern, where), home)
                    rules.append(PermissionRule(permission, pattern, _action(action, where)))
            else:
                raise PermissionConfigError(
                    f"permission {key!r}: expected an action (allow, ask, deny) or a mapping "
                    f"of pattern to action, got {value!r}"
                )
        return tuple(rules)
    if isinstance(config, Sequence) and not isinstance(config, bytes | bytearray):
        return tuple(_rule_from_item(item, index, home) for index, item in enumerate(config))
    raise PermissionConfigError(
        f"permission: expected an action, a mapping or a list of rules, got {config!r}"
    )


def tools_map_to_rules(tools: object) -> Ruleset:
    """Rules for an opencode agent's legacy ``tools: {write: false, bash: true}`` map.

    As opencode converts it: ``false`` is deny and ``true`` allow, for every
    subject; ``write``, ``edit``, ``patch`` and ``multiedit`` all mean
    ``edit``. A ``permission`` config of the same agent should be merged
    after these rules so that it wins, as in opencode.
    """
    if not isinstance(tools, Mapping):
        raise PermissionConfigError(
            f"tools: expected a mapping of tool name to bool, got {tools!r}"
        )
    rules: list[PermissionRule] = []
    for raw_name, enabled in tools.items():
        name = _key(raw_name, f"tools key {raw_name!r}")
        if not isinstance(enabled, bool):
            raise PermissionConfigError(f"tools {name!r}: expected true or false, got {enabled!r}")
        rules.append(PermissionRule(permission_name(name), "*", "allow" if enabled else "deny"))
    return tuple(rules)
