import { afterEach } from 'vitest'
import { createTestRuntime } from '../../src/testing.js'
import type { TestRuntime, TestRuntimeOptions } from '../../src/testing.js'

/**
 * A factory of test runtimes for one test file: every runtime it made is closed and its temporary
 * directory removed after each test, whether the test passed or not.
 */
export function testRuntimes(): (options: TestRuntimeOptions) => Promise<TestRuntime> {
  const open: TestRuntime[] = []
  afterEach(async () => {
    while (open.length) await open.pop()!.cleanup()
  })
  return async (options) => {
    const rt = await createTestRuntime(options)
    open.push(rt)
    return rt
  }
}
