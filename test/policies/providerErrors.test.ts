/**
 * classifyError on real providers' error responses (the corpus in test/policies/fixtures: OpenAI,
 * Azure OpenAI, Anthropic, Gemini, Vertex AI, Bedrock, Mistral, Groq, OpenRouter, Ollama), each
 * classified two ways, with the shipped patterns:
 * - as a hand-written adapter throws it: a `ModelHttpError` with the response body as its message
 *   and the response headers, as docs/models-and-tools.md shows;
 * - as the AI SDK adapter throws it: the response served from a loopback HTTP server and requested
 *   through `aiSdkModel` with the provider's AI SDK client (test/helpers/aiSdkProviders.ts).
 * Each must give the expected category and the wait the response asks for.
 */
import { APICallError } from 'ai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ModelHttpError } from '../../actors/model.js'
import type { ModelRequest } from '../../actors/model.js'
import { aiSdkModel } from '../../src/aiSdk.js'
import type { Classified } from '../../src/policies/classifyError.js'
import { classifyError } from '../../src/policies/classifyError.js'
import { aiSdkModelFor } from '../helpers/aiSdkProviders.js'
import type { OpenAIServer } from '../helpers/openaiServer.js'
import { startOpenAIServer } from '../helpers/openaiServer.js'
import { ANSWERED_AT, bodyText, providerErrors } from './fixtures/index.js'
import type { ProviderErrorFixture } from './fixtures/index.js'

function outcome(classified: Classified): ProviderErrorFixture['expected'] {
  return {
    category: classified.failure.category,
    ...(classified.retryAfterMs !== undefined ? { retryAfterMs: classified.retryAfterMs } : {}),
  }
}

function request(): ModelRequest {
  return {
    threadId: 'provider-errors',
    directiveName: 'corpus',
    turn: 1,
    attempt: 1,
    messages: [{ role: 'user', content: 'hello' }],
    tools: [],
    signal: new AbortController().signal,
  }
}

describe('classifyError on provider error responses thrown by a hand-written adapter', () => {
  it.each(providerErrors)('should classify $provider $what as $expected.category', (fixture) => {
    const error = new ModelHttpError(fixture.status, bodyText(fixture), { headers: fixture.headers })

    const classified = classifyError(error, ANSWERED_AT)

    expect(outcome(classified)).toEqual(fixture.expected)
    expect(classified.failure.status).toBe(fixture.status)
  })
})

describe('classifyError on provider error responses thrown by the AI SDK adapter', () => {
  let server: OpenAIServer
  beforeAll(async () => {
    server = await startOpenAIServer()
  })
  afterAll(async () => {
    await server.close()
  })

  it.each(providerErrors)('should classify $provider $what as $expected.category', async (fixture) => {
    server.push({ kind: 'raw', status: fixture.status, headers: fixture.headers, body: bodyText(fixture) })
    const adapter = aiSdkModel({ model: aiSdkModelFor(fixture.provider, server.url) })

    const error: unknown = await adapter.generate(request()).then(
      () => new Error('the call succeeded'),
      (thrown: unknown) => thrown,
    )

    expect(APICallError.isInstance(error)).toBe(true)
    const classified = classifyError(error, ANSWERED_AT)
    expect(outcome(classified)).toEqual(fixture.expected)
    expect(classified.failure.status).toBe(fixture.status)
  })
})
