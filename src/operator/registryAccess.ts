/**
 * The registry of a data directory, opened for one command and closed after it. Every command
 * that reads threads comes through here, so each refuses a directory without spindle data the
 * same way, and none creates an empty registry where one was lost.
 */
import { assertDataDir, assertRegistryKept, dataPaths } from '../../persistence/paths.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { Registry, ThreadRecord } from '../../persistence/types.js'
import { SpindleError } from '../base/errors.js'
import { assertThreadId } from '../base/ids.js'

function openRegistry(dir: string): Registry {
  const paths = dataPaths(dir)
  assertDataDir(paths)
  // A lost registry with threads left: say so, and never create an empty one in its place.
  assertRegistryKept(paths)
  return openSqliteRegistry({ path: paths.registry, durability: 'process' })
}

/** Runs `fn` with the data directory's registry open (DATA_DIR_NOT_FOUND when it holds no spindle data). */
export function withRegistry<T>(dir: string, fn: (registry: Registry) => T): T {
  const registry = openRegistry(dir)
  try {
    return fn(registry)
  } finally {
    registry.close()
  }
}

/** A thread's registry row; INVALID_THREAD_ID or THREAD_NOT_FOUND otherwise. */
export function recordOf(registry: Registry, dir: string, id: string): ThreadRecord {
  assertThreadId(id)
  const record = registry.get(id)
  if (!record) {
    throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dataPaths(dir).root}. \`spindle ls\` lists the threads there.`, {
      details: { threadId: id },
    })
  }
  return record
}
