"""``SubvisorError``: the root of every exception the supervisor raises, and its tree.

Like httpx's ``_exceptions``, this module draws the whole tree, so that a
reader sees what an ``except`` catches. It holds only the root, on the bottom
floor where every room can import it; each other class lives in the room
whose work it names (right column: ``supervisor.<room>``). In parentheses, a
base from outside the tree: ``except ValueError`` (say) still catches those.
``tests/test_errors.py`` keeps the drawing true::

    SubvisorError
      * BadInputError                               cli
      * ControlError                                cli
      * ControlRequestError (ValueError)            cli
      * ReportExtraMissingError (ImportError)       cli
      * RunInterruptedError                         cli
      * ConfigError                                 config
        * UntrustedProjectError                     config
      * McpAnswerTooLargeError (httpx2.StreamError) delegation
      * FileTooLargeError (OSError)                 files
      * NotARegularFileError (OSError)              files
      * OutsideConfinementError (OSError)           files
      * RefusedYamlError (yaml.MarkedYAMLError)     files
      * EventBudgetExceededError                    kernel
      * NestedSupervisorError                       kernel
      * NodeLinkAuthError                           kernel
      * RequestRefusedError                         kernel
      * SpawnError                                  kernel
        * FleetCapacityError                        kernel
        * FleetExhaustedError                       kernel
        * NodeLostError                             kernel
        * PlacementError                            kernel
          * UnplaceableError                        kernel
        * SandboxUnsupportedError                   kernel
      * WorkerExitedError                           kernel
      * WorkerRequestError                          kernel
      * CommandTooComplexError (ValueError)         policy
      * PermissionConfigError (ValueError)          policy
      * MemoryDirError                              profiles
      * ProfileError (ValueError)                   profiles
        * NotAProfileError                          profiles
        * RefusedProfileFileError                   profiles
      * SubagentTypeError (ValueError)              profiles
        * AmbiguousAgentTypeError                   profiles
        * ProfileUnavailableError                   profiles
        * UnknownAgentTypeError                     profiles
      * ModelError                                  providers
        * ModelProviderError                        providers
          * ModelAuthError                          providers
          * ModelBadRequestError                    providers
          * ModelConnectionError                    providers
          * ModelRateLimitError                     providers
          * ModelResponseError                      providers
          * ModelServerError                        providers
          * ScenarioError                           providers
        * ModelStringError (ValueError)             providers
        * UnknownProviderError (LookupError)        providers
      * SseTooLargeError (ValueError)               providers
      * StoreError                                  state
        * AmbiguousTaskIdError (LookupError)        state
        * DuplicateSessionError                     state
        * UnknownSessionError (LookupError)         state
      * TaskError                                   state
        * DuplicateTaskError                        state
        * TaskNotRunningError                       state
        * UnknownTaskError (LookupError)            state
      * WorkflowError                               workflow
        * ActorAskFailedError                       workflow
          * ActorAnswerInvalidError                 workflow
          * ActorCrashedError                       workflow
          * EscalationUnansweredError               workflow
        * DuplicateActorNameError                   workflow
        * WorkflowActorPinnedModelError             workflow
        * WorkflowFailedError                       workflow
        * WorkflowScriptError                       workflow

Every name ends in ``Error``. Where a renamed class was public, its old name
is kept as an alias: ``supervisor.RequestRefused``, and in
``supervisor.workflow`` ``ActorAnswerInvalid``, ``ActorAskFailed``,
``ActorCrashed``, ``DuplicateActorName`` and ``WorkflowFailed``.

Outside the tree: ``protocol.ProtocolError`` (``protocol`` imports nothing of
ours), split into ``LocalProtocolError`` (we tried to send what the protocol
forbids: our bug) and ``RemoteProtocolError`` (the peer broke the protocol,
or is gone); a ``WorkerHandle`` may pass either on from its connection. The
worker's own errors never cross the pipe as exceptions: they come back as
error answers (``WorkerRequestError``).
"""

from __future__ import annotations

__all__ = ["SubvisorError"]


class SubvisorError(Exception):
    """Base class of every error subvisor raises on purpose."""
