import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createFileThreadFolders } from '../../persistence/fileThreadFolders.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { createMemoryThreadFolders } from '../../persistence/memoryThreadFolders.js'
import { createMemoryTranscriptStore } from '../../persistence/memoryTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import { threadFoldersContract } from '../contract/threadFolders.contract.js'

threadFoldersContract('files', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-folders-'))
  const paths = dataPaths(dir)
  fs.mkdirSync(paths.threads, { recursive: true })
  return {
    folders: createFileThreadFolders(paths),
    transcripts: createJsonlTranscriptStore({ paths, durability: 'process' }),
    destroy: () => fs.rmSync(dir, { recursive: true, force: true }),
  }
})

threadFoldersContract('memory', () => {
  const transcripts = createMemoryTranscriptStore()
  return { folders: createMemoryThreadFolders(transcripts), transcripts }
})
