"""State: what outlives a process, on disk.

The SQLite ``SessionStore`` (sessions, transcripts, events, tasks, usage; one
writer), the ``TaskRegistry`` with each task's record and output dir
(S-RUN-1), usage accounting, where subvisor keeps its files, and crash
recovery of what a dead supervisor left (S-SEC-6). It imports the kernel and
``supervisor.files``, nothing above.
"""
