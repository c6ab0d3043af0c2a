"""Config: settings from files, and the user's trust in what a project supplies.

``$SUBVISOR_HOME/config.toml``, the project's ``subvisor.toml`` and
``.mcp.json`` become ``SubvisorSettings``; what a repository may write (MCP
servers, hooks, project profiles that lift their sandbox) waits for the
user's trust, bound to the file's content (S-SEC-3). Only the command line
reads config files: a library user builds ``SubvisorSettings`` directly. It
imports delegation (for the settings it fills in) and below.
"""
