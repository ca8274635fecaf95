/**
 * The host of one running thread: relays recorded inputs to its actor, checkpoints every
 * transition, notifies subscribers, and settles `done` once the thread stops. What host code
 * holds and sees of it (ThreadHandle, ThreadView) is in threadView.ts; its actor in threadActor.ts.
 */
import type { AnyStateMachine, StateValue } from 'xstate'
import type { Message } from '../../actors/model.js'
import type { ThreadContext, ThreadDirective } from '../../machines/threadContext.js'
import type { ThreadEvent } from '../../machines/threadEvents.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import { effectOf } from '../../machines/effectOf.js'
import { outcomeOf } from '../../machines/threadOutcome.js'
import type { ThreadEffect } from '../../machines/effectOf.js'
import type { ToolCut } from '../../actors/effectPorts.js'
import { makeEnvelope } from '../../persistence/envelope.js'
import { DESCRIPTOR_GIVE_UP_MS, finishedShortOfDescriptors, isDescriptorShortage, isStorageFailure } from '../../persistence/storageFailure.js'
import type { RegistryPatch } from '../../persistence/groupCommit.js'
import type { StateEnvelope, ThreadStatus, TranscriptEntry } from '../../persistence/types.js'
import { SpindleError, describeError, isSpindleError } from '../base/errors.js'
import { applyRepairs } from './continuation.js'
import type { RepairedCall } from './continuation.js'
import { applyToMessages, messagesFromTranscript } from './messages.js'
import { replayTranscript } from './replay.js'
import { isActive, statusOfValue } from './threadStatus.js'
import type { ThreadHandle, ThreadView } from './threadView.js'
import { viewOf } from './threadView.js'
import type { ThreadActor, ThreadSnapshot } from './threadActor.js'
import { createActorFrom } from './threadActor.js'
import type { ThreadServices as Services } from './threadServices.js'

/** @internal What a live thread needs from its runtime. */
export type ThreadServices = Services<LiveThread>

/** @internal */
export class LiveThread implements ThreadHandle {
  readonly done: Promise<ThreadOutcome>
  /** Its `done` was rejected while its last checkpoint still waits for descriptors (see finish). */
  private toldShortOfDescriptors = false
  private resolveDone!: (outcome: ThreadOutcome) => void
  private rejectDone!: (error: unknown) => void
  private actor: ThreadActor | null = null
  private unsubscribeActor: (() => void) | null = null
  /** Allocated on the first subscriber (most recovered threads never get one). */
  private listeners: Set<(view: ThreadView) => void> | null = null
  private messageLog: Message[] | null = null
  /** Whether the conversation came from outside this object and was not yet checked for tool calls left without results. */
  private unchecked: boolean
  /** Tool call id → tool name, for the conversation built here; allocated on first use. */
  private toolNames: Map<string, string> | null = null
  /**
   * Keys of tool intents recorded, each with how the run that recorded it ended if it recorded no
   * result; null while there are none (most threads, most of the time).
   */
  private intents: Map<string, ToolCut> | null
  /** The last good snapshot as state.json holds it; null while only `lastGoodRaw` is known. */
  private lastGood: unknown = null
  /** The last good snapshot as the actor made it, persisted on demand (see `persist`). */
  private lastGoodRaw: ThreadSnapshot | null = null
  private lastStatus: ThreadStatus | null = null
  private lastValue: StateValue | null = null
  private lastTurns = -1
  /** The suspend reason last staged for the registry: a reason changes with a status, or alone. */
  private lastSuspendReason: ThreadContext['suspendReason'] = null
  private finished = false
  private pendingNotes: Array<[string, unknown]> = []
  private pendingInput: ThreadEvent | null = null
  /** A restored actor's first notification repeats what is on disk: no checkpoint for it. */
  private restoring = false
  /** The effect running for the current state: its key and what stops it. */
  private effectKey: string | null = null
  private stopEffect: (() => void) | null = null
  /** Parked for want of storage: nothing runs or is written until `unpark`. */
  private parkedFlag = false

  constructor(
    readonly id: string,
    private readonly services: ThreadServices,
    options: { messages?: Message[]; intents?: Iterable<readonly [key: string, cut: ToolCut]>; seeded?: boolean } = {},
  ) {
    this.messageLog = options.messages ?? null
    this.unchecked = options.seeded ?? false
    const intents = options.intents ? [...options.intents] : []
    this.intents = intents.length > 0 ? new Map(intents) : null
    this.done = new Promise<ThreadOutcome>((resolve, reject) => {
      this.resolveDone = resolve
      this.rejectDone = reject
    })
    // `done` may legitimately go unobserved (fire-and-forget spawns); never an unhandled rejection.
    this.done.catch(() => {})
  }

  get status(): ThreadStatus {
    return this.lastStatus ?? 'created'
  }

  /**
   * Starts the actor, which checkpoints its first snapshot. A restored `snapshot` must be a private
   * copy: XState mutates what it restores, and it is kept as the last good snapshot.
   */
  start(machine: AnyStateMachine, init: { input: unknown } | { snapshot: unknown }): void {
    const actor = (
      'snapshot' in init
        ? createActorFrom(machine, { snapshot: init.snapshot }, this.id, this.services.inspect)
        : createActorFrom(machine, { input: init.input }, this.id, this.services.inspect)
    ) as ThreadActor
    this.actor = actor
    this.restoring = 'snapshot' in init
    if ('snapshot' in init) {
      this.lastGood = init.snapshot
      this.lastGoodRaw = null
    }
    const subscription = actor.subscribe({
      next: (snapshot) => this.onSnapshot(snapshot),
      error: (error) => this.onActorError(error),
    })
    this.unsubscribeActor = () => subscription.unsubscribe()
    actor.start()
  }

  getSnapshot(): ThreadView {
    if (!this.actor) throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${this.id} has not started.`)
    return viewOf(this.id, this.actor.getSnapshot())
  }

  subscribe(listener: (view: ThreadView) => void): () => void {
    ;(this.listeners ??= new Set()).add(listener)
    if (this.actor) this.notifyOne(listener, viewOf(this.id, this.actor.getSnapshot()))
    return () => void this.listeners?.delete(listener)
  }

  directive(): ThreadDirective {
    return this.actor?.getSnapshot().context.directive ?? { name: '', prompt: '' }
  }

  /** The machine's current context (read-only by convention). */
  context(): ThreadContext {
    if (!this.actor) throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${this.id} has not started.`)
    return this.actor.getSnapshot().context
  }

  replies() {
    return this.services.replies(this)
  }

  /** True once the thread has stopped here (finished, suspended, or detached). */
  get stopped(): boolean {
    return this.finished
  }

  /** Records a note (not a machine input) in the transcript now. */
  note(type: string, data: unknown): void {
    if (this.finished || this.parkedFlag || this.fencedOff()) return
    this.append(type, data)
  }

  /** Parked for want of storage (see `park`). */
  get parked(): boolean {
    return this.parkedFlag
  }

  /**
   * Stops the thread's effect and takes nothing more (inputs, notes) until `unpark`: a write of
   * its failed for want of storage, and what it did since its last recorded input is not kept.
   * The actor stays, in the state after that input, which its transcript holds.
   */
  park(): void {
    if (this.finished || this.parkedFlag) return
    this.parkedFlag = true
    this.haltEffect()
  }

  /**
   * Carries a parked thread on once `note` is written: the note is the probe, one line where the
   * step would cost a model call whose reply might not be recordable either. A failure throws
   * (and is reported to `storageFailed` again). Restarted from its current snapshot, the thread
   * re-enters its step as after a crash: a tool whose intent is recorded is not run twice unless
   * idempotent, a model reply that was not recorded is asked for again. False when there is
   * nothing to carry on.
   */
  unpark(machine: AnyStateMachine, note: [type: string, data: unknown]): boolean {
    if (!this.parkedFlag || this.finished) return false
    this.append(note[0], note[1])
    this.parkedFlag = false
    return this.restart(machine)
  }

  /**
   * The conversation when it may hold tool calls left without results — just loaded from the
   * transcript (recovery, restart) or seeded (continuation) — once; null otherwise. A conversation
   * built here reply by reply has a result for every call by the time the model is called again.
   */
  messagesToCheck(): readonly Message[] | null {
    const messages = this.messages()
    if (!this.unchecked) return null
    this.unchecked = false
    return messages
  }

  /** The conversation so far; rebuilt from the transcript the first time it is needed after recovery. */
  messages(): readonly Message[] {
    if (this.messageLog === null) {
      this.unchecked = true
      const { entries } = this.services.transcripts.read(this.id)
      this.messageLog = messagesFromTranscript(entries, (this.toolNames ??= new Map()))
    }
    return this.messageLog
  }

  /** Applies repairs of tool calls left without results (recorded by the caller as a note). */
  repairMessages(repairs: readonly RepairedCall[]): void {
    if (this.messageLog === null) return
    const repaired = applyRepairs(this.messageLog, repairs)
    this.messageLog.length = 0
    this.messageLog.push(...repaired)
  }

  /** How the run that recorded the intent of call `key` ended without its result; null when none was recorded. */
  toolIntent(key: string): ToolCut | null {
    return this.intents?.get(key) ?? null
  }

  recordToolIntent(key: string, call: { id: string; name: string }): void {
    this.append('tool_intent', { key, callId: call.id, name: call.name })
    // Should this process die before the result is recorded, the next one finds it cut by a crash.
    ;(this.intents ??= new Map()).set(key, 'crash')
  }

  /**
   * Records a note in the transcript just before the thread's next entry: bookkeeping (such as
   * "recovered here") need not delay a thread that has nothing else to write yet.
   */
  noteBeforeNext(type: string, data: unknown): void {
    this.pendingNotes.push([type, data])
  }

  /** An input recorded and applied just before the thread's next one (as `noteBeforeNext`, for the machine). */
  deliverBeforeNext(event: ThreadEvent): void {
    this.pendingInput = event
  }

  /**
   * True (and the thread detached, and the host told) once this process may no longer act for the
   * thread: checked on every write, and before an effect that writes nothing first (a model call).
   */
  fencedOff(): boolean {
    return this.fence() !== null
  }

  private fence(): SpindleError | null {
    const fenced = this.services.fenced?.(this.id)
    if (!fenced) return null
    // Its leases ran out because the disk would not take their renewal: parked, not let go. Once
    // the disk takes writes, a heartbeat renews them (or finds the thread taken over and lets it
    // go) before this thread writes again.
    if (!this.finished && this.services.storageFailed && isStorageFailure(fenced)) {
      this.services.storageFailed(this, fenced)
      return fenced
    }
    if (!this.finished) this.services.report(fenced, this.id)
    this.detach(fenced)
    return fenced
  }

  private append(type: string, data: unknown): TranscriptEntry {
    const fenced = this.fence()
    if (fenced) throw fenced
    try {
      // Each note leaves the queue once written: a write that fails leaves the rest for the next.
      while (this.pendingNotes.length > 0) {
        const [noteType, noteData] = this.pendingNotes[0]!
        this.services.transcripts.append(this.id, noteType, noteData)
        this.pendingNotes.shift()
      }
      return this.services.transcripts.append(this.id, type, data)
    } catch (error) {
      if (!this.finished && this.services.storageFailed && isStorageFailure(error)) {
        this.services.storageFailed(this, error)
        throw error
      }
      // The file says another process writes the thread now (this one was stopped between its
      // lease check and its write): stop here, as a lease found gone does.
      if (isSpindleError(error) && error.code === 'LEASE_LOST') {
        if (!this.finished) this.services.report(error, this.id)
        this.detach(error)
        this.services.writtenAhead?.(this.id)
      }
      throw error
    }
  }

  /**
   * Records an input in the transcript, then sends it to the machine. Inputs the machine would not
   * accept (late results of a stopped effect) are dropped, never recorded or applied.
   */
  deliver(event: ThreadEvent): boolean {
    const actor = this.actor
    if (this.finished || this.parkedFlag || !actor || this.fencedOff()) return false
    if (this.pendingInput !== null) {
      const pending = this.pendingInput
      this.pendingInput = null
      if (actor.getSnapshot().can(pending)) this.deliver(pending)
    }
    const snapshot = actor.getSnapshot()
    if (snapshot.status !== 'active' || !snapshot.can(event)) return false
    const { type, ...data } = event
    if (event.type === 'MODEL_REPLIED' && event.attempt > 1) {
      this.append('retry_succeeded', { at: event.at, turn: event.turn, attempts: event.attempt })
    }
    this.append(type, data)
    if (this.messageLog !== null) {
      const names = (this.toolNames ??= new Map())
      if (event.type === 'MODEL_REPLIED') for (const call of event.toolCalls) names.set(call.id, call.name)
      applyToMessages(this.messageLog, event, names)
    }
    actor.send(event)
    return true
  }

  /** An unexpected exception in an effect or subscriber: the thread ends in `error`, nothing else does. */
  crash(error: unknown, code = 'THREAD_CRASHED'): void {
    if (this.finished || this.parkedFlag) return
    const described = describeError(error)
    this.services.report(error, this.id)
    let delivered: boolean
    try {
      delivered = this.deliver({
        type: 'FAIL',
        at: this.services.now(),
        error: { code: described.code === 'Error' ? code : described.code, message: described.message },
      })
    } catch (failure) {
      // Its FAIL could not be recorded: parked for want of storage, or stopped (a lease lost).
      if (this.parkedFlag || this.finished) return
      throw failure
    }
    if (!delivered) this.onActorError(error)
  }

  /**
   * Restarts the thread from its last checkpointed snapshot, as a supervisor does after a crash:
   * the actor and its in-flight effects are stopped, a new actor is restored and re-enters the
   * state it was in (a tool whose intent is recorded is not run twice unless idempotent).
   * Subscribers and `done` carry over. False when there is nothing to restart.
   */
  restart(machine: AnyStateMachine): boolean {
    if (this.finished || !this.actor || this.lastGoodPersisted() === null) return false
    // The checkpoint as state.json holds it: plain JSON, private to the new actor.
    const source = this.actor.getSnapshot().status === 'active' ? this.actor.getPersistedSnapshot() : this.lastGoodPersisted()
    const snapshot = JSON.parse(JSON.stringify(source)) as unknown
    this.haltEffect()
    this.unsubscribeActor?.()
    this.actor.stop()
    this.messageLog = null
    this.toolNames = null
    this.start(machine, { snapshot })
    return true
  }

  /**
   * The thread's own files are damaged (a broken transcript chain found when its history was
   * read): it ends in `error` with `error`, and nothing more is written to its transcript or
   * state.json, which stay as they are for a person to repair. Restarting would only read the
   * same damage again. The registry says `error`, so no later runtime rehydrates it either.
   */
  abandon(error: SpindleError): void {
    if (this.finished || !this.actor) return
    const context = this.actor.getSnapshot().context as ThreadContext
    const failure = { code: error.code, message: error.message }
    this.services.commit.stageRegistry(this.id, { status: 'error', at: this.services.now(), cost: { ...context.usage }, outcome: { error: failure } })
    this.lastStatus = 'error'
    this.finish({ ...outcomeOf('error', context), error: failure })
  }

  /** Stops the actor without touching its checkpoint (runtime close, or a lease lost). */
  detach(reason: SpindleError): void {
    if (this.finished) return
    this.finished = true
    // Lost to another process (or possibly lost: its lease ran out unrenewed): what it staged
    // must not overwrite what the new owner writes. Its transcript holds every step anyway.
    if (reason.code === 'LEASE_LOST') this.services.commit.discard(this.id)
    this.haltEffect()
    this.unsubscribeActor?.()
    this.actor?.stop()
    this.services.transcripts.close(this.id)
    this.services.forget(this)
    this.rejectDone(reason)
  }

  private lastGoodPersisted(): unknown {
    if (this.lastGood === null && this.lastGoodRaw !== null) this.lastGood = this.persist(this.lastGoodRaw)
    return this.lastGood
  }

  /** `snapshot` as state.json holds it, built any time after the actor made it (it is immutable). */
  private persist(snapshot: ThreadSnapshot): unknown {
    return this.actor!.logic.getPersistedSnapshot(snapshot)
  }

  private onSnapshot(snapshot: ThreadSnapshot): void {
    if (this.finished) return
    const status = statusOfValue(snapshot.value)
    if (this.restoring) {
      // Restoring is not a transition: state.json (plus the transcript tail) already says this.
      this.restoring = false
      this.lastStatus = status
      this.lastValue = snapshot.value
      this.lastTurns = snapshot.context.usage.turns
      this.lastSuspendReason = status === 'suspended' ? snapshot.context.suspendReason : null
      this.runEffect(snapshot)
      return
    }
    const previous = { status: this.lastStatus, value: this.lastValue }
    this.lastValue = snapshot.value
    this.lastGoodRaw = snapshot
    this.lastGood = null
    const { transcripts, checkpoints, commit } = this.services
    // Built only if a round writes it: most are replaced by the thread's next transition first.
    // The snapshot is immutable and the position a copy, so it says what it says now whenever built.
    const position = transcripts.position(this.id)
    const savedAt = this.services.now()
    let envelope: StateEnvelope | null = null
    checkpoints.stage(this.id, () => (envelope ??= makeEnvelope(this.id, status, position, this.persist(snapshot), savedAt)))
    commit.noteCheckpoint(this.id)
    const usage = snapshot.context.usage
    const stopped = !isActive(status)
    // Only a suspended thread's reason is kept (the context keeps a cancelled one's old reason).
    const reason = status === 'suspended' ? snapshot.context.suspendReason : null
    if (status !== this.lastStatus || usage.turns !== this.lastTurns || stopped || reason !== this.lastSuspendReason) {
      // Built field by field: a literal of spreads and fields is a slow path in V8.
      const patch: RegistryPatch = { cost: { ...usage } }
      if (status !== this.lastStatus || reason !== this.lastSuspendReason) {
        patch.status = status
        patch.at = this.services.now()
        patch.suspendReason = reason
      }
      if (stopped) patch.outcome = { result: snapshot.context.result ?? undefined, error: snapshot.context.error }
      commit.stageRegistry(this.id, patch)
      this.lastStatus = status
      this.lastTurns = usage.turns
      this.lastSuspendReason = reason
    }
    if (this.services.observe) {
      try {
        this.services.observe(this, snapshot, previous)
      } catch (error) {
        this.services.report(error, this.id)
      }
    }
    if (this.listeners !== null && this.listeners.size > 0) {
      const view = viewOf(this.id, snapshot)
      for (const listener of this.listeners) this.notifyOne(listener, view)
    }
    if (stopped) this.finish(outcomeOf(status === 'suspended' ? 'suspended' : (status as ThreadOutcome['status']), snapshot.context))
    else this.runEffect(snapshot)
  }

  /**
   * Starts the effect the state asks for, once per step, after the step's checkpoint is staged;
   * stops the previous one when the step changed (a CANCEL during a model call aborts the call).
   */
  private runEffect(snapshot: ThreadSnapshot): void {
    let effect: ThreadEffect | null
    try {
      effect = effectOf(snapshot)
    } catch (error) {
      // A context a hand-edited state.json left without what the step reads (its limits, say).
      this.haltEffect()
      queueMicrotask(() => this.crash(error))
      return
    }
    if ((effect?.key ?? null) === this.effectKey) return
    this.haltEffect()
    if (effect === null || this.finished) return
    this.effectKey = effect.key
    try {
      this.stopEffect = (this.services.effects[effect.src] as (input: unknown) => () => void)(effect.input)
    } catch (error) {
      // Thrown while starting (a host clock that throws, a snapshot edited into a state it cannot
      // be in): inside the actor's notification, so the FAIL is its own transition, as for a
      // subscriber that throws.
      queueMicrotask(() => this.crash(error))
    }
  }

  private haltEffect(): void {
    const stop = this.stopEffect
    this.stopEffect = null
    this.effectKey = null
    stop?.()
  }

  private notifyOne(listener: (view: ThreadView) => void, view: ThreadView): void {
    try {
      listener(view)
    } catch (error) {
      this.listeners?.delete(listener)
      // Deferred: we are inside the actor's notification; the FAIL is its own transition.
      queueMicrotask(() =>
        this.crash(new SpindleError('SUBSCRIBER_FAILED', `A subscriber of thread ${this.id} threw: ${describeError(error).message}`, { cause: error })),
      )
    }
  }

  private finish(reached: ThreadOutcome): void {
    let outcome = reached
    try {
      if (this.services.outputOf) outcome = this.services.outputOf(this.id, reached)
    } catch (error) {
      this.services.report(error, this.id)
    }
    this.finished = true
    this.haltEffect()
    this.unsubscribeActor?.()
    const actor = this.actor
    // Stop outside the notification that brought us here; persistence is already detached.
    queueMicrotask(() => actor?.stop())
    // Its own end, not a round over every running thread: its transcript file, state.json and
    // registry row (so what `done` says, every store says, and a crash keeps).
    // Since when its last checkpoint has been failing for want of descriptors, without a break.
    let shortSince: number | null = null
    const settle = (): void => {
      this.services.commit.whenSettled(this.id).then(
        () => {
          this.services.transcripts.close(this.id)
          this.services.forget(this)
          this.resolveDone(outcome)
        },
        (error: unknown) => {
          // Its last checkpoint waits for the disk (rounds retry, backing off): so does `done`,
          // which says what the registry will say. A runtime closing meanwhile ends the wait.
          if (isStorageFailure(error) && !this.services.commit.closing) {
            // Short of descriptors, `done` does not wait for ever (see parking.ts): it says why
            // after a while. The thread stays this process's until its checkpoint is written.
            shortSince = isDescriptorShortage(error) ? (shortSince ?? this.services.now()) : null
            if (shortSince !== null && this.services.now() - shortSince >= DESCRIPTOR_GIVE_UP_MS && !this.toldShortOfDescriptors) {
              this.toldShortOfDescriptors = true
              const stopped = finishedShortOfDescriptors(this.id, outcome.status, error)
              this.services.report(stopped, this.id)
              this.rejectDone(stopped)
            }
            return settle()
          }
          this.services.forget(this)
          this.rejectDone(error)
        },
      )
    }
    settle()
  }

  /**
   * The actor itself failed (an exception inside machine code). XState's error snapshot is never
   * persisted: the FAIL input is recorded and applied to the last good snapshot instead.
   */
  private onActorError(error: unknown): void {
    if (this.finished || this.parkedFlag) return
    this.services.report(error, this.id)
    this.haltEffect()
    this.unsubscribeActor?.()
    let entry: TranscriptEntry
    try {
      entry = this.append('FAIL', {
        at: this.services.now(),
        error: { code: 'THREAD_CRASHED', message: describeError(error).message },
      })
    } catch (failure) {
      // Parked for want of storage: unparked, it restarts from its last good snapshot.
      if (this.parkedFlag || this.finished) return
      throw failure
    }
    try {
      const replayed = replayTranscript([entry], { from: this.lastGoodPersisted() })
      this.services.checkpoints.stage(
        this.id,
        makeEnvelope(this.id, replayed.status, this.services.transcripts.position(this.id), replayed.snapshot, this.services.now()),
      )
      this.services.commit.noteCheckpoint(this.id)
      const context = (replayed.snapshot as { context: ThreadContext }).context
      this.services.commit.stageRegistry(this.id, {
        status: replayed.status,
        at: this.services.now(),
        cost: { ...context.usage },
        outcome: { error: context.error },
      })
      this.lastStatus = replayed.status
      this.finish(outcomeOf('error', context))
    } catch (replayError) {
      this.finished = true
      this.services.forget(this)
      this.rejectDone(replayError)
    }
  }
}
