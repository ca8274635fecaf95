/**
 * The model call effect: asks the thread's model for its next reply (streamed to whoever listens,
 * traced when a tracer is there), checks what the adapter returned, and hands the reply or the
 * judged failure to the host, which records it before the machine sees it. Side effects. Not
 * imported by machines/.
 */
import type { CallModelInput } from '../machines/effectOf.js'
import type { ThreadEvent } from '../machines/threadEvents.js'
import type { ThreadDirective } from '../machines/threadContext.js'
import type { ModelRequest, ModelResponse, ToolDefinition } from './model.js'
import { InvalidModelResponseError, ModelResponseSchema } from './model.js'
import { abandonable, modelTimeout } from './modelDeadline.js'
import { deniedCapability } from '../src/base/permissions.js'
import { checkFinalAnswer } from './outputSchema.js'
import type { ReplySink } from './replyDelta.js'
import type { ModelCallTrace } from './effectTracing.js'
import type { EffectHost } from './effectPorts.js'
import { detach } from './effectPorts.js'

/** The `emit` of a call nobody listens to. */
function ignorePart(): void {}

/**
 * Gives repeated tool call ids of one reply a suffix: each call must get its own result, and a
 * provider that repeats an id would otherwise leave one call without.
 */
function uniqueCallIds(calls: Array<{ id: string }>): void {
  const seen = new Set<string>()
  for (const call of calls) {
    let id = call.id
    for (let n = 2; seen.has(id); n++) id = `${call.id}_${n}`
    call.id = id
    seen.add(id)
  }
}

/**
 * A tool call's input as the transcript will give it back: its JSON form. An input that has none
 * (a BigInt, a cycle, a function) would make recording the reply throw, and the thread crash and
 * restart until its supervisor gives up; it is an invalid response of the adapter instead.
 */
function recordableInput(adapter: string, call: { id: string; name: string; input: unknown }): unknown {
  if (call.input === undefined) return undefined
  let json: string | undefined
  try {
    json = JSON.stringify(call.input)
  } catch (error) {
    let why = 'it throws when written as JSON'
    try {
      why = String((error as Error).message)
    } catch {}
    throw new InvalidModelResponseError(adapter, `toolCalls: the input of call ${call.id} (${call.name}) cannot be recorded as JSON (${why})`)
  }
  if (json === undefined) throw new InvalidModelResponseError(adapter, `toolCalls: the input of call ${call.id} (${call.name}) has no JSON form (${typeof call.input})`)
  return JSON.parse(json) as unknown
}

/** What a model request says of the directive: its name, instructions and output schema when it has them. */
function directiveFields(directive: ThreadDirective): Pick<ModelRequest, 'directiveName' | 'instructions' | 'outputSchema'> {
  return {
    directiveName: directive.name,
    ...(directive.instructions ? { instructions: directive.instructions } : {}),
    ...(directive.output ? { outputSchema: directive.output } : {}),
  }
}

/**
 * A final answer's check against the directive's output schema, as the reply records it: its JSON
 * (`output`) or what is wrong (`outputErrors`). Nothing for a reply with tool calls or a thread
 * without a schema.
 */
function outputFields(host: EffectHost, threadId: string, directive: ThreadDirective, reply: ModelResponse): { output?: unknown; outputErrors?: string[] } {
  if (!directive.output || reply.toolCalls.length > 0) return {}
  const checked = checkFinalAnswer(reply.text, host.outputValidator(threadId))
  return checked.ok ? { output: checked.json } : { outputErrors: checked.errors }
}

/** The tools the model is shown: its directive's, less those needing a capability the thread lacks. */

function visibleTools(host: EffectHost, threadId: string): readonly ToolDefinition[] {
  const allowed = host.allowedTools(threadId)
  const permissions = host.permissions(threadId)
  if (!allowed && !permissions) return host.toolDefinitions
  return host.toolDefinitions.filter(
    (t) => (!allowed || allowed.has(t.name)) && deniedCapability(permissions, host.tools.get(t.name)?.permissions ?? []) === null,
  )
}

/**
 * Failure semantics: at least once. A model call in flight when the process dies is made again on
 * recovery with the same turn and attempt; a recorded reply is never requested again. A call still
 * unanswered at `timeouts.modelMs` is abandoned (MODEL_TIMEOUT, transient) whether or not the
 * adapter heeds its signal; a reply that comes after that is never recorded.
 */
export function callModelLogic(host: EffectHost) {
  return (input: CallModelInput): (() => void) => {
    // Made when the call starts: a thread waiting for its records to be durable needs none yet.
    let started: AbortController | null = null
    let stopped = false
    let settled = false
    let sink: ReplySink | null = null
    detach(host, input.threadId, async () => {
      await host.checkpointed(input.threadId)
      if (stopped) return
      if ((await host.beforeModelCall(input.threadId, input)) === 'stop' || stopped) return
      const controller = new AbortController()
      started = controller
      const timeout = modelTimeout(host.modelTimeoutMs)
      // On the runtime's clock, so that simulated time reaches it too.
      const timer = host.clock.setTimeout(() => controller.abort(timeout), host.modelTimeoutMs)
      sink = host.replySink(input.threadId, input)
      let event: ThreadEvent
      let span: ModelCallTrace | null = null
      try {
        // Inside the try: a model this runtime lacks fails the attempt like any other failure.
        const model = host.model(input.threadId)
        if (host.tracing) span = host.tracing.modelCall(input.threadId, input, model.name, model.adapter.name)
        const directive = host.directive(input.threadId)
        // Async, so that an adapter throwing before it returns a promise fails like any other.
        const generate = async (): Promise<unknown> =>
          model.adapter.generate({
            threadId: input.threadId,
            ...directiveFields(directive),
            turn: input.turn,
            attempt: input.attempt,
            messages: host.messages(input.threadId),
            tools: visibleTools(host, input.threadId),
            signal: controller.signal,
            streaming: sink !== null,
            emit: sink ? sink.emit : ignorePart,
          })
        const raw = await abandonable(span ? span.within(generate) : generate(), controller.signal)
        const checked = ModelResponseSchema.safeParse(raw)
        if (!checked.success) {
          const issue = checked.error.issues[0]!
          throw new InvalidModelResponseError(model.adapter.name, `${issue.path.join('.') || 'the response'}: ${issue.message}`)
        }
        const reply = checked.data as ModelResponse
        uniqueCallIds(reply.toolCalls)
        for (const call of reply.toolCalls) call.input = recordableInput(model.adapter.name, call)
        const replied: Extract<ThreadEvent, { type: 'MODEL_REPLIED' }> = {
          type: 'MODEL_REPLIED',
          at: host.clock.now(),
          turn: input.turn,
          attempt: input.attempt,
          text: reply.text,
          toolCalls: reply.toolCalls,
          usage: reply.usage,
          model: model.name,
        }
        // Set after, not spread in: a literal that spreads takes V8's slow path, on every reply.
        if (directive.output && reply.toolCalls.length === 0) Object.assign(replied, outputFields(host, input.threadId, directive, reply))
        span?.replied(reply)
        event = replied
      } catch (error) {
        const timedOut = controller.signal.aborted && controller.signal.reason === timeout
        host.clock.clearTimeout(timer)
        if (controller.signal.aborted && !timedOut) return
        // Before the judgement, which may wait for hooks: what streamed is void from now.
        if (timedOut) sink?.discarded('timed_out', 'transient')
        const judged = await host.judgeModelFailure(input.threadId, timedOut ? timeout : error, input)
        sink?.discarded('failed', judged.failure.category)
        if (controller.signal.aborted && !timedOut) return
        span?.failed(judged.failure)
        if (judged.failure.category === 'context_length' && !judged.decision) {
          if (await host.handOffOnContextLength(input.threadId, judged.failure)) return
          if (controller.signal.aborted) return
        }
        event = {
          type: 'MODEL_FAILED',
          at: host.clock.now(),
          turn: input.turn,
          attempt: input.attempt,
          error: judged.failure,
          retryInMs: judged.retryInMs,
          ...(judged.decision ? { decision: judged.decision } : {}),
        }
      } finally {
        host.clock.clearTimeout(timer)
        span?.end()
      }
      if (stopped) return
      settled = true
      const delivered = (!controller.signal.aborted || event.type === 'MODEL_FAILED') && host.deliver(input.threadId, event)
      if (sink && event.type === 'MODEL_REPLIED') {
        if (delivered) sink.recorded()
        else sink.discarded(host.closing() ? 'closed' : 'cancelled')
      }
    })
    // A call that already delivered has nothing to stop (and aborting costs an Error and an event).
    return () => {
      if (settled) return
      stopped = true
      sink?.discarded(host.closing() ? 'closed' : 'cancelled')
      started?.abort(new Error('model call stopped'))
    }
  }
}
