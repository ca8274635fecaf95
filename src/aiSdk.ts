/**
 * `spindle/ai-sdk`: run spindle threads on any Vercel AI SDK (`ai` 6) language model — OpenAI,
 * Anthropic, Google, or an OpenAI-compatible server. Each model call is one step with tools the SDK
 * never runs itself and with the SDK's retries off: spindle runs the tools durably and its retry
 * policy classifies every provider failure (rate limit, exhausted quota, context length, network).
 *
 * @example
 * import { createOpenAI } from '@ai-sdk/openai'
 * import { createRuntime } from 'spindle'
 * import { aiSdkModel } from 'spindle/ai-sdk'
 *
 * const model = aiSdkModel({
 *   model: createOpenAI({ apiKey: process.env.OPENAI_API_KEY }).chat('gpt-4o-mini'),
 *   contextWindow: 128_000,
 *   pricing: { inputPerMillion: 0.15, outputPerMillion: 0.6 },
 * })
 * const rt = await createRuntime({ dir: '.spindle', model, tools: [lookup] })
 */
export { aiSdkModel } from '../actors/aiSdkModel.js'
export type { AiSdkModelOptions, AiSdkPricing, AiSdkProviderOptions } from '../actors/aiSdkModel.js'
