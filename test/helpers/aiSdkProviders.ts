/**
 * AI SDK language models for each provider of the error corpus, pointed at a loopback server, so
 * that a provider's error response becomes the `APICallError` its AI SDK client would throw.
 *
 * OpenAI, Azure OpenAI, OpenRouter and Ollama (its OpenAI-compatible endpoint) go through the real
 * `@ai-sdk/openai` chat model; `@ai-sdk/azure` builds on that same model and error handler. The
 * other providers' packages are not installed here: their models are stood in for by the pieces
 * those packages are made of — `postJsonToApi` and `createJsonErrorResponseHandler` from
 * `@ai-sdk/provider-utils` (the version `@ai-sdk/openai` uses) with each package's own error
 * schema and message, copied from its source (linked at each).
 */
import { createOpenAI } from '@ai-sdk/openai'
import type { LanguageModelV3 } from '@ai-sdk/provider'
import { createJsonErrorResponseHandler, createJsonResponseHandler, postJsonToApi } from '@ai-sdk/provider-utils'
import type { LanguageModel } from 'ai'
import { z } from 'zod'
import type { Provider } from '../policies/fixtures/index.js'

type ErrorHandler = ReturnType<typeof createJsonErrorResponseHandler>

// https://github.com/vercel/ai/blob/main/packages/anthropic/src/anthropic-error.ts
const anthropicErrors = createJsonErrorResponseHandler({
  errorSchema: z.object({ type: z.literal('error'), error: z.object({ type: z.string(), message: z.string() }) }),
  errorToMessage: (data) => data.error.message,
})

// https://github.com/vercel/ai/blob/main/packages/google/src/google-error.ts (also used by
// @ai-sdk/google-vertex)
const googleErrors = createJsonErrorResponseHandler({
  errorSchema: z.object({
    error: z.object({ code: z.number().nullable(), message: z.string(), status: z.string(), details: z.array(z.unknown()).nullish() }),
  }),
  errorToMessage: (data) => data.error.message,
})

// https://github.com/vercel/ai/blob/main/packages/amazon-bedrock/src/bedrock-error.ts and the
// Converse call in bedrock-chat-language-model.ts
const bedrockErrors = createJsonErrorResponseHandler({
  errorSchema: z.object({ message: z.string(), type: z.string().nullish() }),
  errorToMessage: (error) => `${error.message ?? 'Unknown error'}`,
})

// https://github.com/vercel/ai/blob/main/packages/mistral/src/mistral-error.ts
const mistralErrors = createJsonErrorResponseHandler({
  errorSchema: z.object({ object: z.literal('error'), message: z.string(), type: z.string(), param: z.string().nullable(), code: z.string().nullable() }),
  errorToMessage: (data) => data.message,
})

// https://github.com/vercel/ai/blob/main/packages/groq/src/groq-error.ts
const groqErrors = createJsonErrorResponseHandler({
  errorSchema: z.object({ error: z.object({ message: z.string(), type: z.string(), code: z.string().nullish() }) }),
  errorToMessage: (data) => data.error.message,
})

/** A model that posts each call to the server and fails the way `provider`'s AI SDK client does. */
function errorHandlingModel(provider: string, url: string, failedResponseHandler: ErrorHandler): LanguageModelV3 {
  return {
    specificationVersion: 'v3',
    provider,
    modelId: 'fixture-model',
    supportedUrls: {},
    async doGenerate(options) {
      await postJsonToApi({
        url: `${url}/v1/chat/completions`,
        headers: { 'content-type': 'application/json' },
        body: { prompt: options.prompt },
        failedResponseHandler,
        successfulResponseHandler: createJsonResponseHandler(z.unknown()),
        ...(options.abortSignal ? { abortSignal: options.abortSignal } : {}),
      })
      throw new Error(`${provider}: the server answered with a success where an error response was queued`)
    },
    doStream() {
      throw new Error(`${provider}: streaming is not used by aiSdkModel`)
    },
  }
}

function openaiChat(url: string): LanguageModel {
  return createOpenAI({ baseURL: `${url}/v1`, apiKey: 'test-key' }).chat('fixture-model')
}

/** The AI SDK model for `provider`, talking to the loopback server at `url`. */
export function aiSdkModelFor(provider: Provider, url: string): LanguageModel {
  switch (provider) {
    case 'openai':
    case 'azure-openai':
    case 'openrouter':
    case 'ollama':
      return openaiChat(url)
    case 'anthropic':
      return errorHandlingModel('anthropic.messages', url, anthropicErrors)
    case 'gemini':
      return errorHandlingModel('google.generative-ai', url, googleErrors)
    case 'vertex-ai':
      return errorHandlingModel('google.vertex.chat', url, googleErrors)
    case 'bedrock':
      return errorHandlingModel('amazon-bedrock', url, bedrockErrors)
    case 'mistral':
      return errorHandlingModel('mistral.chat', url, mistralErrors)
    case 'groq':
      return errorHandlingModel('groq.chat', url, groqErrors)
  }
}
