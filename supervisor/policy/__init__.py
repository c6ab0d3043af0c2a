"""Policy: may this agent do this, and who answers when a rule says ask.

Permission rules and modes as opencode and Claude Code spell them
(S-POL-2, S-POL-3), the Bash lexer that tells what a command line runs and
writes (S-SEC-9), what a child inherits from its parent (S-POL-4), the
approval and question requests (S-APR-1), and the choice of a subagent's
sandbox (S-SBX-1, S-SBX-3). It imports profiles, the kernel and ``worker.tools``'
names, nothing above.
"""
