/**
 * Loading a thread that is not live: its snapshot from state.json plus the transcript's tail, or
 * rebuilt from the whole transcript when state.json is missing or damaged — the transcript is the
 * source of truth, state.json the fast path.
 */
import fs from 'node:fs'
import type { ToolCut } from '../../actors/effectPorts.js'
import { SpindleError, isSpindleError } from '../base/errors.js'
import type { PrefetchedThread } from '../../persistence/prefetch.js'
import { staleLinesMessage } from '../../persistence/transcriptLines.js'
import type { CheckpointStore, StateEnvelope, ThreadFolders, ThreadStatus, TranscriptEntry, TranscriptOpenResult, TranscriptStore } from '../../persistence/types.js'
import { isMachineEventEntry, replayTranscript } from '../thread/replay.js'
import type { RecoveryReport } from './api.js'
import type { Reporter } from './events.js'
import { TOOL_ABORTED_AT_SHUTDOWN } from './shutdown.js'

export interface LoaderDeps {
  folders: ThreadFolders
  checkpoints: CheckpointStore
  transcripts: TranscriptStore
  bus: Reporter
}

/**
 * The tool intents a transcript tail records — calls that may have run before the process stopped —
 * each with how its last run ended: `shutdown` when a closing runtime aborted it (its note follows
 * that intent), else `crash`.
 */
export function intentsOf(tail: readonly TranscriptEntry[]): Array<[key: string, cut: ToolCut]> {
  const intents = new Map<string, ToolCut>()
  for (const entry of tail) {
    if (entry.type !== 'tool_intent' && entry.type !== TOOL_ABORTED_AT_SHUTDOWN) continue
    const key = (entry.data as { key: string }).key
    if (entry.type === 'tool_intent') intents.set(key, 'crash')
    else if (intents.has(key)) intents.set(key, 'shutdown')
  }
  return [...intents]
}

export class ThreadLoader {
  constructor(private readonly deps: LoaderDeps) {}

  /**
   * A thread's snapshot from state.json plus its transcript tail, or rebuilt from the whole
   * transcript when state.json is missing or damaged. Opens the thread's transcript.
   */
  load(id: string, registeredAs: ThreadStatus, report?: RecoveryReport, read?: PrefetchedThread): { snapshot: unknown; tail: TranscriptEntry[] } {
    const { checkpoints, transcripts, bus } = this.deps
    let envelope: StateEnvelope | null = null
    /** Reported once state.json has been rebuilt from the transcript: why it was. */
    let rebuiltNotice: SpindleError | null = null
    try {
      envelope = checkpoints.load(id, read?.state)
    } catch (error) {
      if (!isSpindleError(error) || (error.code !== 'STATE_CORRUPT' && error.code !== 'STATE_VERSION_UNSUPPORTED')) {
        // The transcript store never got the prefetched descriptor: it is ours to close.
        if (read?.transcript && 'fd' in read.transcript) fs.closeSync(read.transcript.fd)
        throw error
      }
      rebuiltNotice = new SpindleError('STATE_CORRUPT', `state.json of ${id} was rebuilt from its transcript; the thread goes on from there.`, { details: { threadId: id } })
      bus.report(error, id)
    }
    // From here the transcript store owns a prefetched descriptor (open takes it, or closes it).
    let prefetched = read?.transcript
    if (envelope) {
      let opened: TranscriptOpenResult | null = null
      try {
        opened = transcripts.open(id, envelope.transcript, prefetched)
      } catch (error) {
        // state.json points at a line the transcript no longer holds there, but that was set aside
        // whole: by a compaction killed between its two writes, or as a stale writer's line (a
        // process that lost the thread renamed its state.json over the new owner's). The
        // transcript replays to the thread's state without it.
        const setAside =
          isSpindleError(error) && (error.code === 'TRANSCRIPT_CORRUPT' || error.code === 'TRANSCRIPT_CHAIN_BROKEN')
            ? this.deps.folders.setAside(id, envelope.transcript, Date.parse(envelope.savedAt))
            : null
        if (!setAside) throw error
        rebuiltNotice = new SpindleError(
          'STATE_CORRUPT',
          setAside.why === 'compaction'
            ? `state.json of ${id} points into the transcript a compaction replaced (kept as ${setAside.keptAs}): the compaction was stopped before ` +
                `it rewrote state.json. It was rebuilt from the compacted transcript, which replays to the same state; the thread goes on from there.`
            : `state.json of ${id} points at a line a process wrote after it had lost the thread (found in ${setAside.keptAs}, outside the ` +
                `thread's chain): that process renamed its state.json over the new owner's. It was rebuilt from the transcript; the thread goes on from there.`,
          { details: { threadId: id, keptAs: setAside.keptAs, why: setAside.why } },
        )
        // open closed the prefetched descriptor: the replay below reads the file again.
        prefetched = undefined
      }
      if (opened) {
        if (opened.restored) report?.restored.push(id)
        if (opened.stale) this.reportStale(id, opened.stale)
        const tail = opened.tail
        const snapshot = tail.some(isMachineEventEntry) ? replayTranscript(tail, { from: envelope.snapshot }).snapshot : envelope.snapshot
        return { snapshot, tail }
      }
    }
    // No usable state.json: the transcript is the source of truth, replay it whole.
    const exists = prefetched ? 'fd' in prefetched : this.deps.folders.transcriptBytes(id) !== null
    const opened = exists ? transcripts.open(id, undefined, prefetched) : null
    if (opened?.restored) report?.restored.push(id)
    if (opened?.stale) this.reportStale(id, opened.stale)
    if (!opened || opened.tail.length === 0) {
      // A kill between registering a thread and its first transcript line: spawn never returned.
      throw new SpindleError(
        'FILES_MISSING',
        `Thread ${id} is registered as ${registeredAs} but has no state.json and ` +
          `${opened ? 'an empty transcript.jsonl' : 'no transcript.jsonl'} in ${this.deps.folders.where(id)}. It was registered ` +
          'but never checkpointed, so no step of it was acknowledged; it is marked error.',
        { details: { threadId: id, dir: this.deps.folders.where(id) } },
      )
    }
    report?.rebuilt.push(id)
    if (rebuiltNotice) bus.report(rebuiltNotice, id)
    return { snapshot: replayTranscript(opened.tail).snapshot, tail: opened.tail }
  }

  private reportStale(id: string, stale: NonNullable<TranscriptOpenResult['stale']>): void {
    this.deps.bus.report(new SpindleError('TRANSCRIPT_STALE_LINES', staleLinesMessage(id, stale), { details: { threadId: id, lines: stale } }), id)
  }
}
