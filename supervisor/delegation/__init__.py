"""Delegation: a parent agent hands work to subagents, each in its own worker.

``Subvisor`` is the composition root: it builds one kernel ``Supervisor``,
one model gateway, the store, the task registry and the MCP hub, and serves
its workers' requests. The parts it composes name what they use of it in a
``Protocol`` of their own (``RunHost``, ``AgentToolHost``, ``RootHost``...),
so none of them imports it: ``SubagentRun`` (one subagent from launch to its
terminal record), the Agent tool and its schema, SendMessage, completion
notifications and the command queue, the launch order, the root session,
its background shells, the MCP hub and the lifecycle feed. It imports
policy, profiles, state, providers and the kernel, nothing above.
"""
