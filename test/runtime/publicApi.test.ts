/**
 * Every function the README and docs/api.md name as part of the API can be imported from the package entry.
 */
import { describe, expect, it } from 'vitest'
import * as spindle from '../../src/index.js'

const NAMED_IN_README = [
  'createRuntime',
  'defineTool',
  'scriptedModel',
  'commandTool',
  'runProcess',
  'ModelHttpError',
  'classifyError',
  'showRecovery',
  'findDirective',
  'renderDirective',
  'replayTranscript',
  'readThreadFiles',
  'verifyReplay',
  'requestCancel',
  'requestResume',
  'respondToApproval',
] as const

describe('the package entry', () => {
  it.each(NAMED_IN_README)('should export %s', (name) => {
    expect(typeof (spindle as Record<string, unknown>)[name]).toBe('function')
  })
})
