import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { createFileRequestInbox } from '../../persistence/fileRequestInbox.js'
import { createMemoryRequestInbox } from '../../persistence/memoryRequestInbox.js'
import { dataPaths, threadDir } from '../../persistence/paths.js'
import { approvalFiles, cancelFile, resumeFile, writeRequestFile } from '../../persistence/requestFiles.js'
import type { RequestKind } from '../../persistence/types.js'
import { requestInboxContract } from '../contract/requestInbox.contract.js'

function fileBackend(problems: unknown[] = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-inbox-'))
  const paths = dataPaths(dir)
  fs.mkdirSync(paths.threads, { recursive: true })
  const inbox = createFileRequestInbox({ paths, durability: 'process', onProblem: (error) => problems.push(error) })
  const leave = (threadId: string, kind: RequestKind, body: unknown, requestId?: string): void => {
    fs.mkdirSync(threadDir(paths, threadId), { recursive: true })
    let file = kind === 'cancel' ? cancelFile(paths, threadId) : resumeFile(paths, threadId)
    if (kind === 'approval') {
      const files = approvalFiles(paths, threadId, requestId!)
      fs.mkdirSync(files.dir, { recursive: true })
      file = files.response
    }
    writeRequestFile(paths, threadId, file, body)
  }
  const addThread = (threadId: string): void => void fs.mkdirSync(threadDir(paths, threadId), { recursive: true })
  return { inbox, leave, addThread, paths, destroy: () => fs.rmSync(dir, { recursive: true, force: true }) }
}

requestInboxContract('files', () => fileBackend())

requestInboxContract('memory', () => {
  const inbox = createMemoryRequestInbox()
  return { inbox, addThread: () => {}, leave: (threadId, kind, body, requestId) => void inbox.submit(threadId, kind, body, requestId) }
})

describe('the file request inbox', () => {
  const A = 'a-aaaaaaaaaaaa'

  it('should hand a claim of a file that is not JSON its problem, naming the file as it was written', () => {
    const { inbox, paths, destroy } = fileBackend()
    try {
      fs.mkdirSync(threadDir(paths, A), { recursive: true })
      fs.writeFileSync(cancelFile(paths, A), '{ not json')
      const claimed = inbox.claim(A, 'cancel')!
      expect(claimed.body.ok).toBe(false)
      expect(!claimed.body.ok && claimed.body.problem).toContain(`${cancelFile(paths, A)} is not valid JSON`)
      expect(!claimed.body.ok && claimed.body.problem).not.toContain('.claimed')
    } finally {
      destroy()
    }
  })

  it('should touch no request behind a thread folder that is a link, and report the link once', () => {
    const problems: unknown[] = []
    const { inbox, paths, destroy } = fileBackend(problems)
    const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-elsewhere-'))
    try {
      fs.writeFileSync(path.join(elsewhere, 'cancel.requested'), JSON.stringify({ nonce: 'n' }))
      fs.symlinkSync(elsewhere, threadDir(paths, A))
      expect(inbox.waiting(A, 'cancel')).toBe(true)
      expect(inbox.claim(A, 'cancel')).toBeNull()
      expect(inbox.claim(A, 'cancel')).toBeNull()
      expect(inbox.strayCancels(() => false)).toEqual([])
      expect(fs.existsSync(path.join(elsewhere, 'cancel.requested'))).toBe(true)
      expect(problems).toHaveLength(1)
      expect(problems[0]).toMatchObject({ code: 'DATA_DIR_INVALID' })
    } finally {
      destroy()
      fs.rmSync(elsewhere, { recursive: true, force: true })
    }
  })

  it('should name no thread for a cancel request in a folder whose name is no thread id', () => {
    const { inbox, paths, destroy } = fileBackend()
    try {
      fs.mkdirSync(path.join(paths.threads, 'not a thread'), { recursive: true })
      fs.writeFileSync(path.join(paths.threads, 'not a thread', 'cancel.requested'), '{}')
      expect(inbox.strayCancels(() => false)).toEqual([{ kind: 'cancel', threadId: null, ref: path.join(paths.threads, 'not a thread', 'cancel.requested') }])
    } finally {
      destroy()
    }
  })
})
