/**
 * The contract every ThreadFolders backend keeps, with the transcript store of the same backend.
 * Not collected directly (vitest.config.ts excludes test/contract): each backend's spec file calls
 * `threadFoldersContract`. Known deviations: none.
 */
import { describe, expect, it } from 'vitest'
import type { ThreadFolders, TranscriptStore } from '../../persistence/types.js'

export interface ThreadFoldersBackend {
  folders: ThreadFolders
  transcripts: TranscriptStore
  destroy?: () => void
}

const A = 'a-aaaaaaaaaaaa'

export function threadFoldersContract(name: string, create: () => ThreadFoldersBackend): void {
  describe(`ThreadFolders contract: ${name}`, () => {
    const withFolders = (fn: (backend: ThreadFoldersBackend) => void) => () => {
      const backend = create()
      try {
        fn(backend)
      } finally {
        backend.transcripts.closeAll()
        backend.destroy?.()
      }
    }

    it('should name where a thread is, with its id', withFolders(({ folders }) => {
      expect(folders.where(A)).toContain(A)
    }))

    it('should have no transcript length for a thread without one', withFolders(({ folders }) => {
      expect(folders.transcriptBytes(A)).toBeNull()
    }))

    it('should give the stored transcript length as its position counts it, open or closed', withFolders(({ folders, transcripts }) => {
      transcripts.open(A)
      expect(folders.transcriptBytes(A)).toBe(0)
      transcripts.append(A, 'START', { at: 1 })
      transcripts.append(A, 'note', { text: 'x'.repeat(100) })
      const bytes = transcripts.position(A).bytes
      expect(bytes).toBeGreaterThan(100)
      expect(folders.transcriptBytes(A)).toBe(bytes)
      transcripts.close(A)
      expect(folders.transcriptBytes(A)).toBe(bytes)
    }))

    it('should find nothing set aside for a line still in its transcript', withFolders(({ folders, transcripts }) => {
      transcripts.open(A)
      transcripts.append(A, 'START', { at: 1 })
      expect(folders.setAside(A, transcripts.position(A), 0)).toBeNull()
    }))

    it('should offer a read-ahead that can be stopped, or none', withFolders(({ folders }) => {
      const reader = folders.readAhead()
      if (reader) void reader.cancel()
    }))
  })
}
