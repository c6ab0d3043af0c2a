"""Delegation: a parent agent hands work to subagents, each in its own worker.

``Subvisor`` is the composition root: it builds one kernel ``Supervisor``,
one model gateway, the store, the task registry, the approval desk, the MCP
hub and one ``AgentRequestServer``, and hands each part to what uses it:
``SubagentRun`` (one subagent from launch to its terminal record) gets its
``RunServices`` by name and serves its worker with an ``AgentRequestPolicy``.
The root's tools get what they use by name too, none the ``Subvisor``
itself: every session's Agent tool its ``LaunchServices`` (the run starter
among them), SendMessage the live runs, the registry and the store, the
shell and task tools the registry (and the session's command queue);
``RootSession`` takes these parts from its ``Subvisor`` and hands them out.
Also here: completion notifications and the command queue, the launch
order, the root session, the MCP hub and the lifecycle feed. It
imports policy, profiles, state, providers and the kernel, nothing above.
"""
