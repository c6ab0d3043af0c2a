"""The agent runtime: one loop for every agent, and the ports it talks through."""

from ._command import AGENT_COMMANDS
from ._faults import EXIT_FAULT_CODE, commit_fault
from ._loop import AgentLoop
from ._ports import ApprovalPort, EventSink, ModelPort, ToolPort
from ._toolbox import HostTool, QueueingHostTool, Toolbox
from ._worker_ports import (
    ASK_USER_QUESTION_SPEC,
    AskUserQuestionTool,
    BorrowedMcpTool,
    CoordinatorReplyTool,
    McpLifecycleError,
)

__all__ = [
    "AGENT_COMMANDS",
    "ASK_USER_QUESTION_SPEC",
    "EXIT_FAULT_CODE",
    "AgentLoop",
    "ApprovalPort",
    "AskUserQuestionTool",
    "BorrowedMcpTool",
    "CoordinatorReplyTool",
    "EventSink",
    "HostTool",
    "McpLifecycleError",
    "ModelPort",
    "QueueingHostTool",
    "ToolPort",
    "Toolbox",
    "commit_fault",
]
