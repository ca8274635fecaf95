/**
 * spindle's public API. Everything not exported here is internal.
 */
import './threadpool.js'
export { createRuntime } from './runtime/createRuntime.js'
export type {
  Runtime,
  RuntimeOptions,
  SpawnOptions,
  DirectiveSpec,
  ApproveOptions,
  AnswerOptions,
  FollowUpOptions,
  CancelResult,
  RequestsReport,
  RecoveryReport,
  Problem,
  LifecycleEvent,
  LifecycleEventType,
} from './runtime/api.js'
export type { BudgetView, ChildSummary } from './runtime/budgetView.js'
export type { TelemetryOptions, TracerProviderLike } from './runtime/telemetryOptions.js'
export type { EventsOptions, ThreadStreamEvent, ThreadStreamEventType, StreamEventBase, ApprovalKind, LimitReached } from './runtime/streamEvents.js'
export type { BudgetAmounts, BudgetUsage } from '../persistence/ledgerTypes.js'
export type { WaitOptions, WaitReport, SettledThread, WaitCycleEnd } from './thread/waits.js'
export { orchestratorMachine } from '../machines/orchestrator.machine.js'
export type { RestartType, SupervisionStrategy, OrchestratorEmitted } from '../machines/orchestrator.machine.js'
export { requestCancel, requestResume, respondToApproval, pendingApprovals, readRequestLog } from './thread/requests.js'
export type { ApprovalRequest, ApprovalResponse, CallRequest, CancelRequest, RequestLogEntry } from './thread/requests.js'
export { compileHooks } from './policies/hooks.js'
export type { HookSpec, CodeHook, HookEvent, HookAction, HookDecision, HookLayer } from './policies/hooks.js'
export type { HookInput } from './policies/hookInput.js'
export { proposeLimit, escalationMessage } from './policies/escalation.js'
export type { ThreadHandle, ThreadView, ThreadStep } from './thread/threadView.js'

export { scriptedModel } from '../actors/scriptedModel.js'
export type { Script, ScriptedTurn, ScriptedReply, ScriptedFault, ScriptedModelOptions } from '../actors/scriptedModel.js'
export { ModelHttpError } from '../actors/model.js'
export type { ModelAdapter, ModelRequest, ModelResponse, ModelStreamPart, Message, ToolDefinition } from '../actors/model.js'
export type { ReplyDelta, ReplyAttempt, ReplyDiscardReason } from '../actors/replyDelta.js'
export type { RepliesOptions } from './runtime/replyStream.js'
export { REPLY_BUFFER_LIMIT } from './runtime/replyStream.js'
export { defineTool, waitForAnswer } from '../actors/tools.js'
export type { Tool, ToolContext, ToolSpec, NeedsApproval, AnswerWait } from '../actors/tools.js'
export { askHuman } from '../actors/askHuman.js'
export type { AskHumanOptions } from '../actors/askHuman.js'
export { runProcess, commandTool } from '../actors/processTool.js'
export type { ProcessResult, RunProcessOptions, CommandInvocation, CommandToolSpec } from '../actors/processTool.js'
export { systemClock } from './base/clock.js'
export type { Clock } from './base/clock.js'

export { threadMachine } from '../machines/thread.machine.js'
export type { Limits, ThreadPolicy } from '../machines/threadPolicy.js'
export type { ThreadOutcome } from '../machines/threadOutcome.js'
export type { ThreadEvent, ToolCall, ErrorCategory, FailureInfo } from '../machines/threadEvents.js'
export type { ThreadContext, ThreadDirective, Usage, LimitHit, SuspendReason, PendingCall, CallDecision } from '../machines/threadContext.js'

export { replayTranscript, SPAWN_ENTRY } from './thread/replay.js'
export type { ReplayOptions, ReplayResult } from './thread/replay.js'
export { serveInspector } from './operator/inspector.js'
export type { Inspector, InspectorOptions, ReplySource } from './operator/inspector.js'
export { readThreadFiles, verifyReplay } from './operator/inspectThread.js'
export type { ThreadFiles, ReplayCheck } from './operator/inspectThread.js'

export { classifyError } from './policies/classifyError.js'
export { systemDefaults, readConfigLayer, mergeConfig, loadFileLayers, userConfigFile } from '../config/load.js'
export type { Config, ConfigLayer } from '../config/schema.js'
export type { RetryPolicy, Classified } from './policies/classifyError.js'

export { loadDirectiveFile, findDirective, renderDirective, directiveDirs } from './operator/directiveFile.js'
export type { DirectiveFile } from './operator/directiveFile.js'
export type { DirectiveFrontMatter } from '../config/directiveSchema.js'

export { SpindleError, isSpindleError } from './base/errors.js'
export { showRecovery } from './operator/progress.js'
export type { ProgressOut } from './operator/progress.js'
export type { SpindleErrorCode } from './base/errors.js'

export type { ThreadStatus, ThreadRecord, Cost, StateEnvelope, TranscriptEntry, Durability } from '../persistence/types.js'
