"""Profiles: who a subagent is, and where that is written down.

The ``AgentProfile`` model (S-PROF-2, S-PROF-5), profile files (Markdown
with YAML frontmatter, in Claude Code's and opencode's dialects), the
catalog of every profile a session sees and which one a name means
(S-PROF-3, S-TOOL-2), the built-in profiles, and a profile's memory
(S-PROF-8). It imports the providers (model strings), the kernel's errors and
``supervisor.files``, nothing above.
"""
