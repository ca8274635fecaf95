/**
 * A model adapter over the Vercel AI SDK (`ai` 6): any AI SDK language model — OpenAI, Anthropic,
 * Google, an OpenAI-compatible server — becomes a spindle ModelAdapter. Side effects. Not
 * imported by machines/.
 *
 * A request with an output schema asks the provider for it through the SDK's structured-output
 * mode (`Output.object`: OpenAI's `response_format` json_schema, and the like); the tools stay
 * declared beside it. The SDK's own check of the answer is not what decides: an answer it refuses
 * is returned as text all the same, and spindle validates it and asks again with the errors.
 *
 * One adapter call is exactly one model step: tools are declared without `execute`, so the SDK
 * never runs them (spindle does, durably), and the SDK's own retries are off, so spindle's retry
 * policy alone decides what is retried and how long to wait. Failures are rethrown untouched:
 * `classifyError` reads the SDK's `APICallError` (status, headers, provider error body).
 *
 * While someone listens to the reply (`request.streaming`), the call is made with `streamText`
 * and each text and tool-input delta is handed to `request.emit` as it arrives; the reply returned
 * is built from the same stream, so it is the one a `generateText` call would have given. An
 * error the stream carries (an error reply, a connection cut half way) is thrown as it came, so a
 * broken stream classifies like a failed call. Nobody listening: one plain `generateText` call.
 */
import { NoObjectGeneratedError, Output, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai'
import type { JSONSchema7, JSONValue, LanguageModel, LanguageModelUsage, ModelMessage, TextStreamPart, ToolResultPart, ToolSet } from 'ai'
import type { ToolCall } from '../machines/threadEvents.js'
import type { Message, ModelAdapter, ModelRequest, ModelResponse, ModelStreamPart, ToolDefinition } from './model.js'

/** Provider-specific options, as `generateText` takes them (e.g. `{ openai: { parallelToolCalls: false } }`). */
export type AiSdkProviderOptions = NonNullable<Parameters<typeof generateText>[0]['providerOptions']>

/** Prices in US dollars per million tokens; with them every reply carries its cost. */
export interface AiSdkPricing {
  inputPerMillion: number
  outputPerMillion: number
}

export interface AiSdkModelOptions {
  /** An AI SDK language model, e.g. `createOpenAI({ apiKey }).chat('gpt-4o-mini')`. */
  model: LanguageModel
  /** The adapter's name in errors and logs (default `provider:modelId`). */
  name?: string
  /** The model's context window in tokens; enables `context_window_pressure` hooks. */
  contextWindow?: number
  /** When given, each reply's usage carries its cost in US dollars. */
  pricing?: AiSdkPricing
  providerOptions?: AiSdkProviderOptions
  maxOutputTokens?: number
  temperature?: number
}

function modelName(model: LanguageModel): string {
  return typeof model === 'string' ? model : `${model.provider}:${model.modelId}`
}

/**
 * A tool result's `content` is what the tool returned: a string as it is, anything else as JSON
 * text (src/messages.ts). JSON goes back to the provider as JSON, anything else as text; a failed
 * call is marked as an error result.
 */
function toolOutput(message: Extract<Message, { role: 'tool' }>): ToolResultPart['output'] {
  let value: JSONValue | undefined
  try {
    value = JSON.parse(message.content) as JSONValue
  } catch {
    value = undefined
  }
  if (value === undefined) {
    return message.isError ? { type: 'error-text', value: message.content } : { type: 'text', value: message.content }
  }
  return message.isError ? { type: 'error-json', value } : { type: 'json', value }
}

function assistantMessage(content: string, toolCalls: readonly ToolCall[] | undefined): ModelMessage {
  if (!toolCalls || toolCalls.length === 0) return { role: 'assistant', content }
  return {
    role: 'assistant',
    content: [
      ...(content !== '' ? [{ type: 'text' as const, text: content }] : []),
      ...toolCalls.map((call) => ({ type: 'tool-call' as const, toolCallId: call.id, toolName: call.name, input: call.input })),
    ],
  }
}

/** Spindle's conversation as AI SDK model messages; consecutive tool results share one tool message. */
export function toModelMessages(messages: readonly Message[]): ModelMessage[] {
  const out: ModelMessage[] = []
  for (const message of messages) {
    switch (message.role) {
      case 'user':
        out.push({ role: 'user', content: message.content })
        break
      case 'assistant':
        out.push(assistantMessage(message.content, message.toolCalls))
        break
      case 'tool': {
        const part: ToolResultPart = {
          type: 'tool-result',
          toolCallId: message.toolCallId,
          toolName: message.toolName,
          output: toolOutput(message),
        }
        const last = out[out.length - 1]
        if (last?.role === 'tool') last.content.push(part)
        else out.push({ role: 'tool', content: [part] })
        break
      }
    }
  }
  return out
}

/** Tool declarations without `execute`: the model may call them, only spindle runs them. */
function toToolSet(definitions: readonly ToolDefinition[]): ToolSet {
  const tools: ToolSet = {}
  for (const def of definitions) {
    tools[def.name] = tool({ description: def.description, inputSchema: jsonSchema(def.inputSchema as JSONSchema7) })
  }
  return tools
}

function tokens(count: number | undefined): number {
  return typeof count === 'number' && Number.isFinite(count) && count > 0 ? Math.round(count) : 0
}

/** The stream's errors are thrown by `streamReply`; the SDK would otherwise log each to the console. */
function ignoreError(): void {}

/** What one streamed step gave: its text, tool calls and usage. */
interface Streamed {
  text: string
  toolCalls: ToolCall[]
  usage: LanguageModelUsage | undefined
}

/**
 * Reads a `streamText` result's parts to the end: text and tool-input deltas go to `emit` as they
 * come, and the reply is put together from the same parts. An `error` part is thrown as it came
 * (an APICallError with its status and headers, a network error with its code); a stream ended by
 * the signal throws the signal's reason.
 */
async function streamReply(result: { fullStream: AsyncIterable<TextStreamPart<ToolSet>> }, signal: AbortSignal, emit: (part: ModelStreamPart) => void): Promise<Streamed> {
  let text = ''
  const toolCalls: ToolCall[] = []
  let usage: LanguageModelUsage | undefined
  try {
    for await (const part of result.fullStream) {
      switch (part.type) {
        case 'text-delta':
          text += part.text
          emit({ type: 'text', text: part.text })
          break
        case 'tool-input-start':
          emit({ type: 'tool_call', callId: part.id, toolName: part.toolName })
          break
        case 'tool-input-delta':
          emit({ type: 'tool_input', callId: part.id, text: part.delta })
          break
        // As generateText keeps them: calls the SDK could not parse too (spindle validates inputs).
        case 'tool-call':
          toolCalls.push({ id: part.toolCallId, name: part.toolName, input: part.input ?? {} })
          break
        case 'finish-step':
          usage = part.usage
          break
        case 'error':
          throw part.error
        case 'abort':
          throw signal.reason ?? new Error('model call aborted')
      }
    }
  } catch (error) {
    // A cancel may surface as the provider's failure to read the body it stopped.
    throw signal.aborted ? signal.reason : error
  }
  if (signal.aborted) throw signal.reason
  return { text, toolCalls, usage }
}

/**
 * A spindle model adapter over an AI SDK language model.
 *
 * @example
 * import { createOpenAI } from '@ai-sdk/openai'
 * const model = aiSdkModel({
 *   model: createOpenAI({ apiKey: process.env.OPENAI_API_KEY }).chat('gpt-4o-mini'),
 *   contextWindow: 128_000,
 *   pricing: { inputPerMillion: 0.15, outputPerMillion: 0.6 },
 * })
 * const rt = await createRuntime({ dir: '.spindle', model, tools: [lookup] })
 */
export function aiSdkModel(options: AiSdkModelOptions): ModelAdapter {
  const { model, pricing } = options
  const name = options.name ?? modelName(model)
  const adapter: ModelAdapter = {
    name,
    ...(options.contextWindow !== undefined ? { contextWindow: options.contextWindow } : {}),
    async generate(request: ModelRequest): Promise<ModelResponse> {
      const usageOf = (usage: LanguageModelUsage | undefined): ModelResponse['usage'] => {
        const inputTokens = tokens(usage?.inputTokens)
        const outputTokens = tokens(usage?.outputTokens)
        const counted: ModelResponse['usage'] = { inputTokens, outputTokens }
        if (pricing) counted.cost = (inputTokens * pricing.inputPerMillion + outputTokens * pricing.outputPerMillion) / 1_000_000
        return counted
      }
      const call = {
        model,
        ...(request.outputSchema ? { output: Output.object({ schema: jsonSchema(request.outputSchema as JSONSchema7) }) } : {}),
        ...(request.instructions ? { system: request.instructions } : {}),
        messages: toModelMessages(request.messages),
        ...(request.tools.length > 0 ? { tools: toToolSet(request.tools) } : {}),
        stopWhen: stepCountIs(1),
        maxRetries: 0,
        abortSignal: request.signal,
        ...(options.providerOptions !== undefined ? { providerOptions: options.providerOptions } : {}),
        ...(options.maxOutputTokens !== undefined ? { maxOutputTokens: options.maxOutputTokens } : {}),
        ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
      }
      if (request.streaming && request.emit) {
        const streamed = await streamReply(streamText({ ...call, onError: ignoreError }), request.signal, request.emit)
        return { text: streamed.text, toolCalls: streamed.toolCalls, usage: usageOf(streamed.usage) }
      }
      let result
      try {
        result = await generateText(call)
      } catch (error) {
        // An answer that is not JSON, or not the schema's: the model's to correct, not a failed call.
        if (request.outputSchema && NoObjectGeneratedError.isInstance(error)) return { text: error.text ?? '', toolCalls: [], usage: usageOf(error.usage) }
        throw error
      }
      // Calls the SDK could not parse (bad JSON, unknown tool) are kept: spindle validates every
      // input and answers a bad one with an error result the model can correct.
      const toolCalls: ToolCall[] = result.toolCalls.map((call) => ({ id: call.toolCallId, name: call.toolName, input: call.input ?? {} }))
      return { text: result.text, toolCalls, usage: usageOf(result.usage) }
    },
  }
  return adapter
}
