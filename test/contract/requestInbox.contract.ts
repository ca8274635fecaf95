/**
 * The contract every RequestInbox backend keeps. Not collected directly (vitest.config.ts excludes
 * test/contract): each backend's spec file calls `requestInboxContract`.
 *
 * A backend gives the inbox and `leave`, which leaves a request for a thread as a writer outside
 * the runtime would (the CLI, a script, a person). Known deviations: none. What only files can be
 * (an unreadable file, a link in place of a folder) is tested with the file backend alone.
 */
import { describe, expect, it } from 'vitest'
import type { InboxRequest, RequestInbox, RequestKind } from '../../persistence/types.js'

export interface RequestInboxBackend {
  inbox: RequestInbox
  /** Makes thread `threadId` exist as a spawn would have (its folder): the runtime writes only for threads that do. */
  addThread(threadId: string): void
  leave(threadId: string, kind: RequestKind, body: unknown, requestId?: string): void
  destroy?: () => void
}

const A = 'a-aaaaaaaaaaaa'
const B = 'b-aaaaaaaaaaaa'

export function requestInboxContract(name: string, create: () => RequestInboxBackend): void {
  describe(`RequestInbox contract: ${name}`, () => {
    const withInbox = (fn: (backend: RequestInboxBackend) => void) => () => {
      const backend = create()
      try {
        fn(backend)
      } finally {
        backend.destroy?.()
      }
    }

    describe('what the runtime leaves for people', () => {
      it('should store an approval request once, and say so', withInbox(({ inbox, addThread }) => {
        addThread(A)
        expect(inbox.hasApproval(A, 'turns-3-x')).toBe(false)
        inbox.putApprovalRequest(A, 'turns-3-x', { id: 'turns-3-x', message: 'first' })
        inbox.putApprovalRequest(A, 'turns-3-x', { id: 'turns-3-x', message: 'second' })
        expect(inbox.hasApproval(A, 'turns-3-x')).toBe(true)
        expect(inbox.hasApproval(A, 'turns-4-x')).toBe(false)
        expect(inbox.hasApproval(B, 'turns-3-x')).toBe(false)
      }))

      it('should keep a decision only next to the request it decides', withInbox(({ inbox, addThread }) => {
        addThread(A)
        inbox.putDecision(A, 'never-asked', { decision: 'approved' })
        expect(inbox.hasApproval(A, 'never-asked')).toBe(false)
        inbox.putApprovalRequest(A, 'turns-3-x', { id: 'turns-3-x' })
        inbox.putDecision(A, 'turns-3-x', { decision: 'denied' })
        expect(inbox.hasApproval(A, 'turns-3-x')).toBe(true)
      }))

      it('should list the requests of a thread that no decision answers yet', withInbox(({ inbox, addThread }) => {
        addThread(A)
        addThread(B)
        expect(inbox.undecided(A)).toEqual([])
        inbox.putApprovalRequest(A, 'turns-3-x', { id: 'turns-3-x' })
        inbox.putApprovalRequest(A, 'turns-6-y', { id: 'turns-6-y' })
        inbox.putApprovalRequest(B, 'turns-3-z', { id: 'turns-3-z' })
        inbox.putDecision(A, 'turns-3-x', { decision: 'approved' })
        expect(inbox.undecided(A)).toEqual(['turns-6-y'])
        expect(inbox.undecided(B)).toEqual(['turns-3-z'])
      }))

      it('should name where a request is answered, when anyone outside can answer it', withInbox(({ inbox }) => {
        const at = inbox.answerAt(A, 'turns-3-x')
        if (at !== null) expect(at).toContain('turns-3-x')
      }))

      it('should take an escalation without throwing', withInbox(({ inbox, addThread }) => {
        addThread(A)
        expect(() => inbox.putEscalation(A, { threadId: A, kind: 'recovery_escalation' })).not.toThrow()
      }))

      it('should leave a cancel request for another process where the inbox then has it waiting, or say none can read it', withInbox(({ inbox, addThread }) => {
        addThread(A)
        const at = inbox.askCancel(A, { nonce: 'n-1', reason: 'enough', by: 'ops' })
        if (at === null) {
          expect(inbox.waiting(A, 'cancel')).toBe(false)
          return
        }
        expect(inbox.waiting(A, 'cancel')).toBe(true)
        // The first look may only say that changes could have been missed: then every thread is looked at.
        const seen = inbox.changed()
        expect(seen.missed || seen.ids.has(A)).toBe(true)
        const claimed = inbox.claim(A, 'cancel')!
        expect(claimed.body).toEqual({ ok: true, value: expect.objectContaining({ nonce: 'n-1', reason: 'enough', by: 'ops' }) })
      }))
    })

    describe('requests from outside', () => {
      it('should have a request waiting once it is left, and say which thread changed once', withInbox(({ inbox, leave }) => {
        inbox.changed()
        expect(inbox.waiting(A, 'cancel')).toBe(false)
        leave(A, 'cancel', { nonce: 'n-1' })
        expect(inbox.waiting(A, 'cancel')).toBe(true)
        expect(inbox.waiting(A, 'resume')).toBe(false)
        expect(inbox.waiting(B, 'cancel')).toBe(false)
        expect(inbox.changed().ids).toEqual(new Set([A]))
        expect(inbox.changed().ids.size).toBe(0)
      }))

      it('should hand a request to one claim only, with what it says, and keep it out of the waiting ones', withInbox(({ inbox, leave }) => {
        leave(A, 'resume', { nonce: 'n-1', by: 'ops' })
        const claimed = inbox.claim(A, 'resume')
        expect(claimed).toMatchObject({ kind: 'resume', threadId: A, body: { ok: true, value: { nonce: 'n-1', by: 'ops' } } })
        expect(typeof claimed!.ref).toBe('string')
        expect(inbox.waiting(A, 'resume')).toBe(false)
        expect(inbox.claim(A, 'resume')).toBeNull()
        inbox.honour(claimed!)
        expect(inbox.waiting(A, 'resume')).toBe(false)
      }))

      it('should keep a request left through the inbox waiting and announced, a second one replacing the first', withInbox(({ inbox, addThread }) => {
        addThread(A)
        inbox.changed()
        inbox.leaveRequest(A, 'resume', { nonce: 'n-1' })
        const ref = inbox.leaveRequest(A, 'resume', { nonce: 'n-2', by: 'ops' })
        expect(inbox.waiting(A, 'resume')).toBe(true)
        expect(inbox.changed().ids).toEqual(new Set([A]))
        const claimed = inbox.claim(A, 'resume')
        expect(claimed).toMatchObject({ kind: 'resume', threadId: A, ref, body: { ok: true, value: { nonce: 'n-2', by: 'ops' } } })
        expect(inbox.claim(A, 'resume')).toBeNull()
      }))

      it('should keep an answer left through the inbox for the request it answers, where answerAt says', withInbox(({ inbox, addThread }) => {
        addThread(A)
        inbox.putApprovalRequest(A, 'turns-3-x', { id: 'turns-3-x' })
        const ref = inbox.leaveRequest(A, 'approval', { approved: false, message: 'no' }, 'turns-3-x')
        const at = inbox.answerAt(A, 'turns-3-x')
        if (at !== null) expect(ref.endsWith(at)).toBe(true)
        expect(inbox.waiting(A, 'approval', 'turns-3-x')).toBe(true)
        expect(inbox.claim(A, 'approval', 'turns-3-x')).toMatchObject({ requestId: 'turns-3-x', ref, body: { ok: true, value: { approved: false, message: 'no' } } })
      }))

      it('should claim nothing when no request was left', withInbox(({ inbox }) => {
        expect(inbox.claim(A, 'cancel')).toBeNull()
        expect(inbox.claim(A, 'approval', 'turns-3-x')).toBeNull()
      }))

      it('should tell approval answers apart by the request they answer', withInbox(({ inbox, leave, addThread }) => {
        addThread(A)
        inbox.putApprovalRequest(A, 'turns-3-x', { id: 'turns-3-x' })
        leave(A, 'approval', { approved: true }, 'turns-3-x')
        expect(inbox.waiting(A, 'approval', 'turns-3-x')).toBe(true)
        expect(inbox.waiting(A, 'approval', 'turns-4-x')).toBe(false)
        expect(inbox.claim(A, 'approval', 'turns-4-x')).toBeNull()
        expect(inbox.claim(A, 'approval', 'turns-3-x')).toMatchObject({ kind: 'approval', threadId: A, requestId: 'turns-3-x', body: { ok: true, value: { approved: true } } })
      }))

      it('should set a refused request aside where it is kept, and a second one beside it', withInbox(({ inbox, leave }) => {
        leave(A, 'cancel', { nonce: 'wrong' })
        const first = inbox.refuse(inbox.claim(A, 'cancel')!)
        leave(A, 'cancel', { nonce: 'wrong again' })
        const second = inbox.refuse(inbox.claim(A, 'cancel')!)
        expect(first).not.toBeNull()
        expect(second).not.toBeNull()
        expect(second).not.toBe(first)
        expect(inbox.waiting(A, 'cancel')).toBe(false)
      }))

      it('should hand out no request claimed by a process that still runs as abandoned, and no claim twice', withInbox(({ inbox, leave }) => {
        expect(inbox.abandoned()).toEqual([])
        leave(A, 'cancel', { nonce: 'n-a' })
        leave(B, 'resume', { nonce: 'n-b' })
        const claims = [inbox.claim(A, 'cancel')!, inbox.claim(B, 'resume')!]
        // Claimed by this process, which runs: not abandoned, however long it takes to act.
        expect(inbox.abandoned()).toEqual([])
        for (const claimed of claims) inbox.honour(claimed)
        expect(inbox.abandoned()).toEqual([])
        expect(inbox.claim(A, 'cancel')).toBeNull()
      }))

      it('should find cancel requests of threads nobody here runs, and set a stray aside unclaimed', withInbox(({ inbox, leave }) => {
        leave(A, 'cancel', { nonce: 'n-a' })
        leave(B, 'cancel', { nonce: 'n-b' })
        const strays = inbox.strayCancels((id) => id === A)
        expect(strays.map((s: InboxRequest) => [s.kind, s.threadId])).toEqual([['cancel', B]])
        expect(inbox.refuse(strays[0]!)).not.toBeNull()
        expect(inbox.waiting(B, 'cancel')).toBe(false)
        expect(inbox.waiting(A, 'cancel')).toBe(true)
        expect(inbox.strayCancels(() => false).map((s) => s.threadId)).toEqual([A])
      }))

      it('should find the answers that answer no open request: decided ones and unknown ones, not another open one', withInbox(({ inbox, leave, addThread }) => {
        addThread(A)
        inbox.putApprovalRequest(A, 'open-1', { id: 'open-1' })
        inbox.putApprovalRequest(A, 'done-0', { id: 'done-0' })
        inbox.putDecision(A, 'done-0', { decision: 'approved' })
        inbox.putApprovalRequest(A, 'elsewhere-5', { id: 'elsewhere-5' })
        leave(A, 'approval', { approved: true }, 'open-1')
        leave(A, 'approval', { approved: true }, 'done-0')
        leave(A, 'approval', { approved: false }, 'typo-9')
        leave(A, 'approval', { approved: true }, 'elsewhere-5')
        const strays = inbox.strayAnswers(A, 'open-1')
        expect(strays.map((s) => [s.requestId, s.decided]).sort()).toEqual([['done-0', true], ['typo-9', false]])
        for (const stray of strays) expect(inbox.refuse(stray)).not.toBeNull()
        expect(inbox.strayAnswers(A, 'open-1')).toEqual([])
        expect(inbox.waiting(A, 'approval', 'open-1')).toBe(true)
        expect(inbox.strayAnswers(B, null)).toEqual([])
      }))

      it('should log what happened to a request', withInbox(({ inbox }) => {
        expect(inbox.log({ at: new Date(0).toISOString(), kind: 'cancel', threadId: A, file: 'x', outcome: 'refused', reason: 'no' })).toBeNull()
      }))
    })

    describe('approvals and unclaimed (a copy to another backend)', () => {
      it('should read every approval request of a thread with its decision, in request id order', withInbox(({ inbox, addThread }) => {
        addThread(A)
        addThread(B)
        expect(inbox.approvals(A)).toEqual([])
        inbox.putApprovalRequest(A, 'turns-6-y', { id: 'turns-6-y', limit: 'turns' })
        inbox.putApprovalRequest(A, 'turns-3-x', { id: 'turns-3-x', limit: 'turns' })
        inbox.putApprovalRequest(B, 'turns-3-z', { id: 'turns-3-z' })
        inbox.putDecision(A, 'turns-3-x', { decision: 'approved', by: 'ops' })
        expect(inbox.approvals(A)).toEqual([
          { requestId: 'turns-3-x', request: { id: 'turns-3-x', limit: 'turns' }, decision: { decision: 'approved', by: 'ops' } },
          { requestId: 'turns-6-y', request: { id: 'turns-6-y', limit: 'turns' }, decision: null },
        ])
      }))

      it('should read the requests left for a thread without claiming them', withInbox(({ inbox, addThread, leave }) => {
        addThread(A)
        addThread(B)
        expect(inbox.unclaimed(A)).toEqual([])
        leave(A, 'cancel', { nonce: 'n-1', reason: 'enough' })
        leave(A, 'approval', { approved: true, by: 'ops' }, 'turns-3-x')
        leave(B, 'resume', { nonce: 'n-2' })
        const found = inbox.unclaimed(A).sort((a, b) => a.kind.localeCompare(b.kind))
        expect(found).toEqual([
          expect.objectContaining({ kind: 'approval', threadId: A, requestId: 'turns-3-x', body: { ok: true, value: { approved: true, by: 'ops' } } }),
          expect.objectContaining({ kind: 'cancel', threadId: A, body: { ok: true, value: { nonce: 'n-1', reason: 'enough' } } }),
        ])
        expect(inbox.waiting(A, 'cancel')).toBe(true)
        expect(inbox.claim(A, 'cancel')?.body).toEqual({ ok: true, value: { nonce: 'n-1', reason: 'enough' } })
        expect(inbox.unclaimed(A).map((r) => r.kind)).toEqual(['approval'])
      }))
    })
  })
}
