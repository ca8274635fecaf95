/**
 * The inspector's source on a data directory: each look opens what it reads (the registry, the
 * leases, the ledger, each state.json and request file) and closes it, as the CLI's commands do,
 * and each button writes the request or response file `spindle approve | deny | answer | cancel |
 * resume` writes. Nothing is held between looks, so a directory the inspector serves can be
 * copied, moved back or repaired under it.
 */
import fs from 'node:fs'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { assertDataDir, dataPaths } from '../../persistence/paths.js'
import { cancelFile, resumeFile } from '../../persistence/requestFiles.js'
import { rejectedAnswers } from '../thread/approvalRecords.js'
import { approvalAnswer, openApprovalRequest } from '../thread/requests.js'
import { readBudgets } from './budgetFigures.js'
import type { InspectorSource } from './inspectorSource.js'
import { locks } from './locks.js'
import { threadLog } from './operator.js'
import { answerThread, approveThread, cancelThread, denyThread, resumeThread } from './operatorActions.js'
import { recordOf, withRegistry } from './registryAccess.js'
import { listThreads } from './threadListing.js'

export function directorySource(dir: string): InspectorSource {
  const paths = dataPaths(dir)
  // A page over a directory that is not there would only show errors, once a second.
  assertDataDir(paths)
  return {
    kind: 'directory',
    name: paths.root,
    look() {
      // Every look, for every thread: the registry and each state.json, never the transcripts —
      // the selected thread's conversation is fetched on its own when it grows.
      const checkpoints = createFileCheckpointStore({ paths, durability: 'process' })
      return {
        threads: listThreads(dir),
        leases: locks(dir).locks,
        budgets: (ids) => readBudgets(dir, ids),
        checkpoint: (id) => checkpoints.load(id),
        openApproval(id, status) {
          const open = openApprovalRequest(dir, id, status)
          return open ? { ...open, answer: approvalAnswer(dir, id, open.id) } : null
        },
        requested: (id, kind) => fs.existsSync((kind === 'cancel' ? cancelFile : resumeFile)(paths, id)),
      }
    },
    transcript: (id) => threadLog(dir, id).entries,
    rejected(id) {
      // An unknown thread is refused (404) as for its transcript.
      withRegistry(dir, (registry) => recordOf(registry, dir, id))
      return rejectedAnswers(paths, id)
    },
    approve: (id, approval, by) => approveThread(dir, id, approval, by),
    deny: (id, reason, by) => denyThread(dir, id, reason, by),
    answer: (id, answer, by) => answerThread(dir, id, answer, by),
    cancel: (id, reason, by) => cancelThread(dir, id, reason, by),
    resume: (id, by) => resumeThread(dir, id, by),
    close() {},
  }
}
