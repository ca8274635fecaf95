/**
 * OpenTelemetry traces of threads, after the semantic conventions for generative AI: a span per
 * thread run (`invoke_agent {directive}`), per turn (`turn {n}`), per model call (`chat {model}`)
 * and per tool call (`execute_tool {tool}`). `@opentelemetry/api` is an optional peer dependency,
 * loaded once by `loadTracing`; without it, or with no tracer provider registered, nothing here
 * runs past a check.
 *
 * A thread's trace context is durable: the W3C traceparent of its first run is kept in its spawn
 * entry, outside the machine's context (replay never sees it), and every later run of the thread —
 * resumed in another process, recovered after a crash — is a child of it, in the same trace.
 */
import type { Context, Span, SpanContext, Tracer } from '@opentelemetry/api'
import type { StateValue } from 'xstate'
import type { EffectTracing, ModelCallTrace, ToolCallTrace } from '../../actors/effectTracing.js'
import type { Message, ModelResponse } from '../../actors/model.js'
import type { ToolOutcome } from '../../actors/tools.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { FailureInfo, ToolCall } from '../../machines/threadEvents.js'
import type { TranscriptStore } from '../../persistence/types.js'
import { SpindleError } from '../base/errors.js'
import type { TelemetryOptions } from './telemetryOptions.js'
import { SPAWN_ENTRY } from '../thread/replay.js'
import { isActive, statusOfValue } from '../thread/threadStatus.js'

type Api = typeof import('@opentelemetry/api')

/** What tracing reads of the runtime. */
export interface TracingDeps {
  transcripts: Pick<TranscriptStore, 'read'>
  /** The name of the thread's directive (its agent name), for the run of a thread this process did not spawn. */
  directiveName(threadId: string): string
  /** The thread's conversation and instructions, read only when content is recorded. */
  conversation(threadId: string): { messages: readonly Message[]; instructions?: string } | null
}

/** The tracer's name on every span (its instrumentation scope). */
const SCOPE = 'spindle'

interface Turn {
  n: number
  span: Span
  ctx: Context
}

interface Run {
  span: Span
  ctx: Context
  recording: boolean
  turn: Turn | null
}

/** `00-<trace id>-<span id>-<flags>`, the W3C traceparent header. */
function traceparentOf(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`
}

function spanContextOf(traceparent: unknown): SpanContext | null {
  if (typeof traceparent !== 'string') return null
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(traceparent)
  if (!m) return null
  return { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16), isRemote: true }
}

/** `provider:model` (the AI SDK adapter's name) as the conventions' provider and model. */
function providerAndModel(adapter: string, model: string): { provider: string; model: string } {
  const colon = adapter.indexOf(':')
  if (colon <= 0) return { provider: adapter, model }
  // The AI SDK names providers `openai.chat`, `anthropic.messages`: the conventions want `openai`.
  const provider = adapter.slice(0, colon)
  return { provider: provider.split('.')[0]!, model: adapter.slice(colon + 1) }
}

function errorTypeOfOutput(output: unknown): string {
  const code = (output as { error?: unknown } | null)?.error
  return typeof code === 'string' ? code : 'tool_error'
}

function json(value: unknown): string {
  try {
    return typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value))
  } catch {
    return String(value)
  }
}

/** The spans of a runtime's threads (see the module doc). */
export class Tracing implements EffectTracing {
  private readonly runs = new Map<string, Run>()
  private readonly recordContent: boolean

  private readonly api: Api
  private readonly tracer: Tracer
  private readonly own: boolean

  constructor(
    otel: OpenTelemetry,
    private readonly deps: TracingDeps,
  ) {
    this.api = otel.api
    this.tracer = otel.tracer
    this.own = otel.own
    this.recordContent = otel.recordContent
  }

  /**
   * Whether spans are made at all: a provider was given, or one is registered globally. Checked as
   * a thread's run starts, so that without one no run, span or traceparent is made or read.
   */
  private enabled(): boolean {
    if (this.own) return true
    const global = this.api.trace.getTracerProvider()
    // The API's global provider is a proxy until an SDK registers a delegate behind it.
    if (global instanceof this.api.ProxyTracerProvider) return global.getDelegateTracer(SCOPE) !== undefined
    return true
  }

  /**
   * A new thread starts: its first run span, under the host's active span at `rt.spawn` or the
   * `spawn_thread` call's span (or else its parent's or predecessor's run). Returns the traceparent
   * to keep in its spawn entry, or null when nothing is traced.
   */
  spawned(threadId: string, name: string, parentId: string | null, previousThreadId: string | null): string | null {
    if (!this.enabled()) return null
    const previous = previousThreadId ? this.runs.get(previousThreadId) : undefined
    let parent = previous ? previous.ctx : this.api.context.active()
    const active = this.api.trace.getSpan(parent)
    if (!active || !this.api.isSpanContextValid(active.spanContext())) {
      // No context manager to carry the spawn_thread call's span here: the parent's turn instead.
      const over = parentId ? this.runs.get(parentId) : undefined
      parent = over ? (over.turn?.ctx ?? over.ctx) : this.api.ROOT_CONTEXT
    }
    const run = this.startRun(threadId, name, parent, { parentId, previousThreadId, resumed: false })
    const sc = run.span.spanContext()
    return this.api.isSpanContextValid(sc) ? traceparentOf(sc) : null
  }

  /** The thread's current run, begun here for a thread this process did not spawn (recovered, resumed). */
  private runOf(threadId: string): Run | null {
    const run = this.runs.get(threadId)
    if (run) return run
    if (!this.enabled()) return null
    const stored = spanContextOf(this.storedTraceparent(threadId))
    const parent = stored ? this.api.trace.setSpanContext(this.api.ROOT_CONTEXT, stored) : this.api.ROOT_CONTEXT
    return this.startRun(threadId, this.deps.directiveName(threadId), parent, { parentId: null, previousThreadId: null, resumed: true })
  }

  private storedTraceparent(threadId: string): unknown {
    try {
      // The last: a later spawn entry is the same id spawned again after a spawn that never returned.
      const spawn = this.deps.transcripts.read(threadId).entries.findLast((e) => e.type === SPAWN_ENTRY)
      return (spawn?.data as { traceparent?: unknown } | undefined)?.traceparent
    } catch {
      // Unreadable here: its run starts a trace of its own rather than failing the thread.
      return undefined
    }
  }

  private startRun(threadId: string, name: string, parent: Context, how: { parentId: string | null; previousThreadId: string | null; resumed: boolean }): Run {
    const attributes: Record<string, string | boolean> = {
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': name,
      'gen_ai.agent.id': threadId,
      'spindle.thread.id': threadId,
    }
    if (how.parentId) attributes['spindle.thread.parent_id'] = how.parentId
    if (how.previousThreadId) attributes['spindle.thread.previous_id'] = how.previousThreadId
    if (how.resumed) attributes['spindle.run.resumed'] = true
    const span = this.tracer.startSpan(`invoke_agent ${name}`, { kind: this.api.SpanKind.INTERNAL, attributes }, parent)
    const run: Run = { span, ctx: this.api.trace.setSpan(parent, span), recording: span.isRecording(), turn: null }
    this.runs.set(threadId, run)
    return run
  }

  /** The span of turn `n`, begun (and the previous turn ended) when the run reaches it. */
  private turnOf(run: Run, threadId: string, n: number): Turn {
    if (run.turn?.n === n) return run.turn
    run.turn?.span.end()
    const span = this.tracer.startSpan(`turn ${n}`, { attributes: { 'spindle.thread.id': threadId, 'spindle.turn': n } }, run.ctx)
    run.turn = { n, span, ctx: this.api.trace.setSpan(run.ctx, span) }
    return run.turn
  }

  modelCall(threadId: string, at: { turn: number; attempt: number }, model: string, adapter: string): ModelCallTrace | null {
    const run = this.runOf(threadId)
    // A run the sampler dropped (or a no-op tracer's) has no spans under it.
    if (!run || !run.recording) return null
    const turn = this.turnOf(run, threadId, at.turn)
    const named = providerAndModel(adapter, model)
    const span = this.tracer.startSpan(
      `chat ${named.model}`,
      {
        kind: this.api.SpanKind.CLIENT,
        attributes: {
          'gen_ai.operation.name': 'chat',
          'gen_ai.provider.name': named.provider,
          'gen_ai.system': named.provider,
          'gen_ai.request.model': named.model,
          'spindle.model': model,
          'spindle.thread.id': threadId,
          'spindle.turn': at.turn,
          'spindle.attempt': at.attempt,
        },
      },
      turn.ctx,
    )
    if (this.recordContent) {
      const seen = this.deps.conversation(threadId)
      if (seen) {
        span.setAttribute('gen_ai.input.messages', json(seen.messages))
        if (seen.instructions) span.setAttribute('gen_ai.system_instructions', seen.instructions)
      }
    }
    return new ModelSpan(this.api, span, this.api.trace.setSpan(turn.ctx, span), this.recordContent)
  }

  toolCall(threadId: string, turn: number, call: ToolCall): ToolCallTrace | null {
    const run = this.runOf(threadId)
    if (!run || !run.recording) return null
    const parent = this.turnOf(run, threadId, turn).ctx
    const span = this.tracer.startSpan(
      `execute_tool ${call.name}`,
      {
        kind: this.api.SpanKind.INTERNAL,
        attributes: {
          'gen_ai.operation.name': 'execute_tool',
          'gen_ai.tool.name': call.name,
          'gen_ai.tool.call.id': call.id,
          'spindle.thread.id': threadId,
          'spindle.turn': turn,
        },
      },
      parent,
    )
    if (this.recordContent) span.setAttribute('gen_ai.tool.call.arguments', json(call.input))
    return new ToolSpan(this.api, span, this.api.trace.setSpan(parent, span), this.recordContent)
  }

  /** A checkpointed transition: a thread that stopped running (done, failed, cancelled, suspended) ends its run. */
  observe(threadId: string, snapshot: { value: StateValue; context: ThreadContext }): void {
    const status = statusOfValue(snapshot.value)
    if (isActive(status)) return
    const context = snapshot.context
    const run = this.runs.get(threadId)
    if (!run) return
    const { span } = run
    span.setAttribute('spindle.thread.status', status)
    span.setAttribute('spindle.thread.turns', context.usage.turns)
    span.setAttribute('gen_ai.usage.input_tokens', context.usage.inputTokens)
    span.setAttribute('gen_ai.usage.output_tokens', context.usage.outputTokens)
    if (status === 'suspended' && context.suspendReason) span.setAttribute('spindle.thread.suspend_reason', String(context.suspendReason))
    if (status === 'error' && context.error) {
      span.setAttribute('error.type', context.error.code)
      span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: context.error.message })
    }
    this.endRun(threadId)
  }

  /** The thread stopped here (ended, detached on close, lost to another process): its run ends. */
  forgotten(threadId: string): void {
    this.endRun(threadId)
  }

  private endRun(threadId: string): void {
    const run = this.runs.get(threadId)
    if (!run) return
    this.runs.delete(threadId)
    run.turn?.span.end()
    run.span.end()
  }
}

/** What a model call's and a tool call's spans share: the span, its context, and ending once. */
abstract class CallSpan {
  protected ended = false

  constructor(
    protected readonly api: Api,
    protected readonly span: Span,
    private readonly ctx: Context,
    protected readonly recordContent: boolean,
  ) {}

  within<T>(body: () => T): T {
    return this.api.context.with(this.ctx, body)
  }
}

class ModelSpan extends CallSpan implements ModelCallTrace {
  replied(reply: ModelResponse): void {
    if (this.ended) return
    const span = this.span
    span.setAttribute('gen_ai.usage.input_tokens', reply.usage.inputTokens)
    span.setAttribute('gen_ai.usage.output_tokens', reply.usage.outputTokens)
    if (reply.usage.cost !== undefined) span.setAttribute('spindle.usage.cost', reply.usage.cost)
    span.setAttribute('gen_ai.response.finish_reasons', [reply.toolCalls.length > 0 ? 'tool_calls' : 'stop'])
    if (this.recordContent) {
      const parts: unknown[] = []
      if (reply.text) parts.push({ type: 'text', content: reply.text })
      for (const call of reply.toolCalls) parts.push({ type: 'tool_call', id: call.id, name: call.name, arguments: call.input })
      span.setAttribute('gen_ai.output.messages', json([{ role: 'assistant', parts, finish_reason: reply.toolCalls.length > 0 ? 'tool_call' : 'stop' }]))
    }
  }

  failed(failure: FailureInfo): void {
    if (this.ended) return
    this.span.setAttribute('error.type', failure.code ?? failure.category)
    this.span.setAttribute('spindle.error.category', failure.category)
    if (failure.status !== undefined) this.span.setAttribute('http.response.status_code', failure.status)
    this.span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: failure.message })
  }

  end(): void {
    if (this.ended) return
    this.ended = true
    this.span.end()
  }
}

class ToolSpan extends CallSpan implements ToolCallTrace {
  end(outcome?: ToolOutcome, paused?: 'approval' | 'wait'): void {
    if (this.ended) return
    this.ended = true
    const span = this.span
    if (paused) span.setAttribute('spindle.tool.paused', paused)
    else if (!outcome) span.setAttribute('spindle.tool.stopped', true)
    else {
      if (this.recordContent) span.setAttribute('gen_ai.tool.call.result', json(outcome.output))
      if (!outcome.ok) {
        const type = errorTypeOfOutput(outcome.output)
        span.setAttribute('error.type', type)
        const message = (outcome.output as { message?: unknown } | null)?.message
        span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: typeof message === 'string' ? message : type })
      }
    }
    span.end()
  }
}

/** The OpenTelemetry API and spindle's tracer, as `loadOpenTelemetry` found them. */
export interface OpenTelemetry {
  api: Api
  tracer: Tracer
  /** The tracer is from a provider the host gave (not the global one, which may be a no-op). */
  own: boolean
  recordContent: boolean
}

/**
 * The OpenTelemetry API and a tracer, or null: `telemetry: false`, or `@opentelemetry/api` is not
 * installed (then a `tracerProvider` given is an error: it cannot be used without the API).
 */
export async function loadOpenTelemetry(telemetry: TelemetryOptions | false | undefined): Promise<OpenTelemetry | null> {
  if (telemetry === false) return null
  const options = telemetry ?? {}
  let api: Api
  try {
    api = await import('@opentelemetry/api')
  } catch (error) {
    if (!options.tracerProvider) return null
    throw new SpindleError(
      'INVALID_OPTIONS',
      'telemetry.tracerProvider was given, but @opentelemetry/api could not be loaded. Install it (npm install @opentelemetry/api) beside spindle.',
      { cause: error, details: { field: 'telemetry.tracerProvider' } },
    )
  }
  const provider = options.tracerProvider
  if (provider !== undefined && typeof provider?.getTracer !== 'function') {
    throw new SpindleError('INVALID_OPTIONS', 'telemetry.tracerProvider must be an OpenTelemetry TracerProvider (an object with getTracer).', {
      details: { field: 'telemetry.tracerProvider' },
    })
  }
  const tracer = (provider ? provider.getTracer(SCOPE) : api.trace.getTracer(SCOPE)) as Tracer
  return { api, tracer, own: provider !== undefined, recordContent: options.recordContent === true }
}
