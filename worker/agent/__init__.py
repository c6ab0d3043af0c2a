"""The agent runtime: one loop for every agent and the ports it talks through, no I/O of its own.

What connects these ports to a pipe lives one floor up, in ``worker``.
"""

from ._faults import EXIT_FAULT_CODE, commit_fault
from ._loop import AgentLoop
from ._ports import ApprovalPort, EventSink, ModelPort, ToolPort
from ._tool_specs import (
    ASK_USER_QUESTION_SPEC,
    ESCALATE_QUESTION_SPEC,
    RESPOND_TO_COORDINATOR_SPEC,
)
from ._toolbox import HostTool, QueueingHostTool, Toolbox

__all__ = [
    "ASK_USER_QUESTION_SPEC",
    "ESCALATE_QUESTION_SPEC",
    "EXIT_FAULT_CODE",
    "RESPOND_TO_COORDINATOR_SPEC",
    "AgentLoop",
    "ApprovalPort",
    "EventSink",
    "HostTool",
    "ModelPort",
    "QueueingHostTool",
    "ToolPort",
    "Toolbox",
    "commit_fault",
]
