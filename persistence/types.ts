/**
 * Storage contracts: one interface per concern (checkpoints, transcript, registry), one
 * implementation per backend behind each. Side effects live behind these; nothing here knows
 * about machines beyond "a persisted snapshot is JSON".
 */
import type { SuspendReason } from '../machines/threadContext.js'
import type { PrefetchedState, PrefetchedTranscript } from './prefetch.js'
import type { EventLog } from './eventLog.js'

export type ThreadStatus = 'created' | 'running' | 'suspended' | 'completed' | 'error' | 'cancelled' | 'continued'


/** How far a thread's transcript had got when a checkpoint was taken. */
export interface TranscriptPosition {
  /** seq of the last entry (0 for an empty transcript). */
  seq: number
  /** hash of the last entry ('' for an empty transcript). */
  hash: string
  /** byte length of the file up to and including the last entry's newline. */
  bytes: number
}

export const EMPTY_POSITION: TranscriptPosition = Object.freeze({ seq: 0, hash: '', bytes: 0 })

/** Cumulative usage of one thread. */
export interface Cost {
  turns: number
  inputTokens: number
  outputTokens: number
  /** In US dollars, as reported by the model adapter (0 when unknown). */
  spend: number
}

/** The contents of state.json. `v` is the schema version; loaders upgrade older versions on read. */
export interface StateEnvelope {
  v: 3
  threadId: string
  /** Derived from the snapshot; duplicated so tools can read status without knowing the machine. */
  status: ThreadStatus
  /** ISO time the snapshot was taken. */
  savedAt: string
  /** The transcript position at the moment the snapshot was taken: every entry up to it is applied. */
  transcript: TranscriptPosition
  /** XState persisted snapshot (plain JSON). */
  snapshot: unknown
}

/**
 * An envelope, or a function that builds it when the store writes it (at most once per write;
 * it must return the same envelope every time). Most staged envelopes are replaced by a newer one
 * before a round writes them, so building them lazily saves copying a snapshot per transition.
 */
export type StagedEnvelope = StateEnvelope | (() => StateEnvelope)

/** The envelope a staged value stands for. */
export function stagedEnvelope(staged: StagedEnvelope): StateEnvelope {
  return typeof staged === 'function' ? staged() : staged
}

export interface CheckpointStore {
  /** Stage the newest envelope of a thread; a later stage of the same thread replaces it. */
  stage(threadId: string, envelope: StagedEnvelope): void
  /**
   * Write every staged envelope atomically (temp file, rename). With durability 'fsync' the temp
   * file is fsynced before the rename and the directory after it, so a returned promise means the
   * new state.json survives power loss; with 'process' it survives a process crash only.
   * `beforePublish`: called once the batch is taken; temp files are written and synced at once,
   * but renamed into place only after its promise resolves (group commit passes a transcript sync,
   * so a state.json never points past a transcript that is not yet durable).
   * `only`: write just these threads' envelopes (the rest stay staged for a later sync), at once:
   * not behind a sync under way unless it is writing one of them. What of them an earlier sync
   * still under way took and has not published is taken from it, which then publishes nothing of
   * those threads; one it is publishing is written again after it. Syncs without `only` run one
   * after another.
   */
  sync(options?: { beforePublish?: () => Promise<unknown>; only?: ReadonlySet<string> }): Promise<void>
  /**
   * Forgets what is staged for the thread, and keeps a sync already under way from publishing it:
   * this process lost the thread to another, which writes its state.json now. A later `stage`
   * of the thread (it is taken back) lifts this.
   */
  discard(threadId: string): void
  /**
   * The stored envelope, null when the thread has none. Throws STATE_CORRUPT naming the file.
   * `read`: the file's bytes already read by a prefetch (backends without files ignore it).
   */
  load(threadId: string, read?: PrefetchedState): StateEnvelope | null
  /** Thread ids that have a stored envelope. */
  list(): string[]
}

/** One line of transcript.jsonl. */
export interface TranscriptEntry {
  seq: number
  /** ISO time the entry was recorded. */
  ts: string
  type: string
  data: unknown
  /** sha256 (hex) over the previous entry's hash and this entry's seq, ts, type and data. */
  hash: string
}

export interface TranscriptOpenResult {
  /** Position after the last intact entry. */
  position: TranscriptPosition
  /** Entries after the `from` position passed to open (all entries when none was passed). */
  tail: TranscriptEntry[]
  /** Set when a torn (incomplete) last line was found; it was moved aside, not deleted. */
  torn: { bytes: number; savedTo: string | null } | null
  /**
   * Set when lines the file had lost (a power loss before its own fdatasync) were written back
   * from the transcript journal: from which byte, up to which, and where the bytes it held from
   * there on were kept.
   */
  restored?: { from: number; to: number; savedTo: string | null }
  /**
   * Set when complete lines that repeat a seq already read were found between the chain's lines
   * (a fenced-off writer's, landed between two of the owner's): skipped, and left in the file.
   */
  stale?: Array<{ offset: number; bytes: number; seq: number }>
}

/**
 * Transcripts, one per thread, append-only and hash-chained.
 *
 * Any number of threads may be open at once, whatever the process's descriptor limit: a backend
 * bounds the descriptors it holds however many threads are open (the file backend keeps at most
 * `maxOpen`, and opens a thread's file again at its next append, where it left off), so a host runs
 * as many live threads as its memory allows.
 */
export interface TranscriptStore {
  /**
   * Open a thread's transcript for appending. Without `from`, a missing transcript is created
   * empty and an existing one is read and verified in full. With `from` (the position recorded in
   * state.json) only the bytes after it are read and verified, chained to `from.hash`.
   * A torn last line is tolerated: it is moved aside to a side file and cut off.
   * Throws TRANSCRIPT_CHAIN_BROKEN (details.seq) or TRANSCRIPT_CORRUPT (details.path) otherwise.
   * `read`: the open file and its last bytes from a prefetch, now owned by the store (backends
   * without files ignore it).
   */
  open(threadId: string, from?: TranscriptPosition, read?: PrefetchedTranscript): TranscriptOpenResult
  /**
   * Append an entry to an open transcript. The bytes are handed to the OS before this returns
   * (they survive a process crash); `sync()` makes them survive power loss.
   */
  append(threadId: string, type: string, data: unknown, ts?: Date): TranscriptEntry
  position(threadId: string): TranscriptPosition
  /**
   * Make every append so far survive power loss (no-op for durability 'process'). A backend may
   * vouch through a journal; `files: true` asks for the thread files themselves to be durable
   * (what a state.json that points into them needs). `threads`: instead, just these threads'
   * files (what their state.json needs; the appends of other threads are not this sync's).
   */
  sync(options?: { files?: boolean; threads?: readonly string[] }): Promise<void>
  /**
   * Deletes the journals of dead processes whose lines every thread they name now holds durably
   * (backends without a journal leave it out). A thread that lacks them and that `mayWriteBack`
   * allows (a stopped thread, which no runtime will open to do it) gets them written back first.
   */
  settleJournals?(mayWriteBack?: (threadId: string) => boolean): Promise<{ removed: string[]; kept: string[] }>
  /** Read and verify a transcript without opening it for append. */
  read(threadId: string): { entries: TranscriptEntry[]; torn: { bytes: number } | null; stale?: TranscriptOpenResult['stale'] }
  /**
   * The process is short of file descriptors: gives up those the store holds that nothing needs
   * now (threads stay open; their files are opened again at their next append). Returns how many
   * it closed. Backends without files leave it out.
   */
  releaseDescriptors?(): number
  close(threadId: string): void
  closeAll(): void
}

/** A row of the registry: the canonical status of a thread. */
export interface ThreadRecord {
  id: string
  directiveName: string
  directive: unknown
  parentId: string | null
  previousThreadId: string | null
  status: ThreadStatus
  /**
   * Why a suspended thread waits (a limit, errors, its budget, a crash-loop quarantine …); null
   * in any other status. Set with the status it explains.
   */
  suspendReason: SuspendReason | null
  /** The secret a request file for the thread must carry: never print it. */
  nonce: string
  /** ms since epoch */
  createdAt: number
  /** ms since epoch: the last change of status (not of cost). */
  updatedAt: number
  cost: Cost | null
  result: unknown
  error: { code: string; message: string } | null
}

export interface RegisterThread {
  id: string
  directiveName: string
  directive: unknown
  parentId?: string | null
  previousThreadId?: string | null
  nonce: string
  createdAt: number
}

/**
 * Crash-loop detection: how many consecutive recoveries found a thread at the same point of its
 * history — `seq`, the last transcript entry that moved it on — without it getting further.
 */
export interface RecoveryCount {
  count: number
  /** null until the thread is first recovered. */
  seq: number | null
}

export interface Registry {
  register(thread: RegisterThread): void
  /**
   * Sets the thread's status, the time of the change and its suspend reason: `suspendReason` when
   * `status` is 'suspended' (null when not given), null for any other status.
   */
  updateStatus(id: string, status: ThreadStatus, at: number, suspendReason?: SuspendReason | null): void
  get(id: string): ThreadRecord | null
  setResult(id: string, outcome: { result?: unknown; error?: { code: string; message: string } | null }): void
  updateCostSnapshot(id: string, cost: Cost): void
  /** Threads in status created or running. */
  listActive(): ThreadRecord[]
  /** The same threads, only id, status and parent: what recovery needs, without parsing every row's JSON. */
  activeStatuses(): Array<{ id: string; status: ThreadStatus; parentId: string | null }>
  /** Id, status and parent of the threads in any of `statuses`, without parsing their rows' JSON. */
  statuses(statuses: readonly ThreadStatus[]): Array<{ id: string; status: ThreadStatus; parentId: string | null }>
  list(filter?: { status?: ThreadStatus | ThreadStatus[]; limit?: number }): ThreadRecord[]
  listChildren(id: string): ThreadRecord[]
  /** The continuation chain that `id` belongs to, oldest first (follows previous_thread_id both ways). */
  chain(id: string): ThreadRecord[]
  /** The thread that continues `id` (its row names `id` as previous), or null: one indexed read, no row parsed. */
  successorOf(id: string): string | null
  /** The thread's recovery count, or null when it has no row. */
  recoveryCount(id: string): RecoveryCount | null
  /** Every count that is not the initial one (0, no seq), by thread id: what recovery reads once. */
  recoveryCounts(): Map<string, RecoveryCount>
  /** Records recovery counts, all in one transaction: durable when the call returns. Unknown ids are skipped. */
  setRecoveryCounts(counts: ReadonlyArray<{ id: string } & RecoveryCount>): void
  /** Sets the counts of `ids` to 0, keeping their seq (a clean stop or a person's resume is no crash). */
  resetRecoveryCounts(ids: readonly string[]): void
  /**
   * Records that a process took these threads (registered or about to be) with these lease tokens
   * (leases.db); a thread's claimed token only grows. A writer that publishes with a smaller token
   * than the thread's claimed one lost the thread (see `leaseToken`). Returns the threads already
   * claimed with the token offered or a larger one, and that token: leases.db handed a token out
   * again (it lost commits, or was deleted), and the caller raises its lease's token past it.
   * A token of 1 (a thread's first lease) needs no record: none is written for it.
   */
  claim(tokens: ReadonlyArray<{ id: string; token: number }>): Array<{ id: string; token: number }>
  /** The largest lease token the thread was claimed with, or null if it never was. */
  leaseToken(id: string): number | null
  /**
   * `leaseToken` of many threads in one read (a backend where each read is a round trip offers
   * it; inside a transaction, like `leaseToken`, the rows stay locked to its end).
   */
  leaseTokens?(ids: readonly string[]): Map<string, number | null>
  /** Run `fn` in one write transaction, begun IMMEDIATE (better-sqlite3 transactions are synchronous). */
  transaction<T>(fn: () => T): T
  /** The event log of the directory's threads (rt.events), appended in this registry's transactions. */
  readonly events: EventLog
  close(): void
}

export type Durability = 'fsync' | 'process'

export type { BudgetAmounts, BudgetUsage, Ledger, LedgerAccount, LedgerProblem, SpawnSlot, StoredAccount } from './ledgerTypes.js'

/** Who runs a thread: one runtime process holds its lease until it expires or is released. */
export interface Lease {
  threadId: string
  /** The runtime process: `<host>:<pid>:<random>`. */
  owner: string
  pid: number
  host: string
  /** ms since epoch */
  acquiredAt: number
  expiresAt: number
  /** Increases every time the lease changes hands: a stale owner's token is smaller. */
  token: number
}

/**
 * Leases over threads, shared by every runtime process on one data directory. Each operation is
 * one SQLite transaction taken with BEGIN IMMEDIATE, so two processes never both acquire a lease.
 */
export interface LeaseStore {
  /**
   * Takes the lease of `threadId` for `owner` when it is free, expired, or already `owner`'s
   * (then it is renewed). Returns the lease when taken, or the other owner's live lease.
   */
  acquire(threadId: string, owner: { id: string; pid: number; host: string }, ttlMs: number, now: number): { acquired: boolean; lease: Lease }
  /**
   * `acquire` of an id `owner` has just made up, which no other process can know of yet (a new
   * thread's): the same outcome, without the lock a contested id needs where that costs a round
   * trip. An id that turns out to have a lease after all is acquired as `acquire` would.
   */
  acquireFresh(threadId: string, owner: { id: string; pid: number; host: string }, ttlMs: number, now: number): { acquired: boolean; lease: Lease }
  /** `acquire` for many threads in one transaction (recovery): which were taken, which are held elsewhere. */
  acquireMany(
    threadIds: readonly string[],
    owner: { id: string; pid: number; host: string },
    ttlMs: number,
    now: number,
    /**
     * Whether another owner's live lease may be taken anyway (its process is known dead). Asked
     * once per owner, with one of its leases: a dead process held all of its threads.
     */
    stale?: (lease: Lease) => boolean,
  ): {
    acquired: string[]
    held: Lease[]
    /** The token of each lease that changed hands to `owner` now, by thread id (one it held already keeps its token). */
    tokens: Map<string, number>
  }
  /** Extends every lease `owner` still holds among `threadIds`; returns the ids it no longer holds. */
  renew(owner: string, threadIds: readonly string[], ttlMs: number, now: number): string[]
  /**
   * Raises the token of `owner`'s lease of `threadId` to `token` (and the last token handed out
   * with it), when the registry holds a claim at or above the token leases.db gave. False when
   * `owner` no longer holds the lease: another process took the thread since.
   */
  raiseToken(threadId: string, owner: string, token: number): boolean
  /** Gives the lease up (the thread stopped here). Only the owner's own lease is removed. */
  release(threadId: string, owner: string): void
  get(threadId: string): Lease | null
  /** Every lease, for `spindle locks` and `doctor`. */
  list(): Lease[]
  /** Removes a lease whatever its state (`spindle locks --apply`); returns what was removed. */
  remove(threadId: string): Lease | null
  /**
   * Removes the lease only while it is still exactly `lease` (same owner and token), so two
   * processes that both found it stale free it once: the later one must not remove the lease the
   * earlier one took in between. Returns whether it was removed.
   */
  removeIf(lease: Lease): boolean
  /** The leases of every owner but `owner` (a runtime looking for stale leases of others). */
  heldByOthers(owner: string): Lease[]
  /**
   * Takes a live lease away from its owner without freeing the thread (`spindle locks --force`):
   * the owner's next renewal finds it gone and it stops writing, and nobody else can take the
   * thread before the lease's expiry, by which time the owner has stopped (self-fencing) even if
   * it never renews. Returns the lease as it was, or null when there is none.
   */
  revoke(threadId: string): Lease | null
  /**
   * Records `owner`'s wait after `check` has seen the waits of every other owner that still holds
   * its waiter's lease, in one transaction; returns its id. When `check` throws, nothing is
   * recorded and its error is thrown. Waits whose owner no longer holds the waiter's lease go.
   */
  recordWait(owner: string, wait: RecordedWait, check: (others: RecordedWait[]) => void): number
  /** The waits of every other owner that still holds its waiter's lease: a read, outside any write. */
  waitsOfOthers(owner: string): RecordedWait[]
  /** The wait ended (settled, timed out, aborted). */
  endWait(owner: string, id: number): void
  /** Every wait of `owner` (its runtime closes). */
  endWaitsOf(owner: string): void
  close(): void
}

/** A `wait_threads` in progress, as the lease store holds it for every process to see. */
export interface RecordedWait {
  waiter: string
  failFast: boolean
  /** The threads waited for, as they were asked for. */
  ids: string[]
}

/** What recovery escalation decided last for one task and reason code (design 003 §6). */
export interface RecoveryRecord {
  taskKey: string
  reasonCode: string
  handler: string
  attempt: number
  action: 'retry' | 'escalate' | 'human'
  recoveryState: 'recovering' | 'escalated_to_human'
  cooldownUntil: number
  /** The thread that failed last. */
  failedThreadId: string
  /** The thread started for the decision, once it has been (null while its cooldown runs). */
  nextThreadId: string | null
  updatedAt: number
}

export interface RecoveryStore {
  get(taskKey: string, reasonCode: string): RecoveryRecord | null
  put(record: RecoveryRecord): void
  /** Decisions whose next thread has not been started yet (a restart resumes them). */
  pending(): RecoveryRecord[]
  /** How often budget governance has acted on a task (its degrade step). */
  degradeStep(taskKey: string): number
  /** Counts one more governance action on a task; returns the new step. */
  bumpDegradeStep(taskKey: string, at: number): number
  /** Every decision stored, pending or not (a copy to another backend: `spindle migrate`). */
  decisions(): RecoveryRecord[]
  /** Every task's degrade step, with when it was last counted. */
  degradeSteps(): Array<{ taskKey: string; step: number; updatedAt: number }>
  close(): void
}

/**
 * What a backend keeps per thread besides its transcript and checkpoint, as the runtime asks about
 * it: where the thread's files are (for messages), how long its stored transcript is without
 * opening it, where a line state.json points at was set aside whole, and a read-ahead of many
 * threads' files for recovery where reading them costs system calls.
 */
export interface ThreadFolders {
  /** Where thread `threadId`'s files are, for messages: a folder, or `(memory)/<id>`. */
  where(threadId: string): string
  /** Bytes the thread's stored transcript holds, read without opening it; null when it has none. */
  transcriptBytes(threadId: string): number | null
  /**
   * Where the transcript line at `anchor` went, when it was set aside whole after `savedAt` (a
   * compaction's copy of the transcript, or a stale writer's line): the file that holds it and
   * why. Null when it was not (the transcript is damaged, or was never moved).
   */
  setAside(threadId: string, anchor: TranscriptPosition, savedAt: number): { keptAs: string; why: 'compaction' | 'stale' } | null
  /**
   * A worker that reads many threads' files ahead on another core (recovery of thousands of
   * threads); null when the backend has nothing to read ahead. Throws when one cannot start.
   */
  readAhead(): import('./prefetch.js').ThreadFileReader | null
}

/** A kind of request that reaches a thread from outside the runtime that runs it. */
export type RequestKind = 'cancel' | 'resume' | 'approval'

/** A request as an inbox holds it. */
export interface InboxRequest {
  kind: RequestKind
  /** The thread it is for; null for one found where no thread is (a stray folder). */
  threadId: string | null
  /** For an approval answer: the request it answers. */
  requestId?: string
  /** Where it was written (a file), as reports and the request log name it. */
  ref: string
}

/** A request claimed from an inbox: no other process acts on it now. */
export interface ClaimedRequest extends InboxRequest {
  /** What was written: its JSON, or why it cannot be read. */
  body: { ok: true; value: unknown } | { ok: false; problem: string }
}

/** One line of the request log: what happened to a request. */
export interface RequestLogLine {
  at: string
  kind: RequestKind
  threadId: string | null
  file: string
  outcome: 'honoured' | 'refused'
  reason: string
  /** Where a refused request was set aside (null: it could not be moved), so a reader can pair the two. */
  keptAs?: string | null
}

/**
 * Requests that reach threads from outside the runtime (cancel, resume, approval answers), and
 * what the runtime leaves for people to answer or read (approval requests and decisions, recovery
 * escalations). One inbox per data directory, shared by the processes that open it: a request is
 * claimed before it is acted on, so exactly one of them acts on it.
 */
export interface RequestInbox {
  /** Whether an approval request `requestId` of the thread is stored, or its decision is. */
  hasApproval(threadId: string, requestId: string): boolean
  /** Stores an approval request, unless it (or its decision) is stored already. */
  putApprovalRequest(threadId: string, requestId: string, request: unknown): void
  /** Stores how request `requestId` was decided, next to the request (nothing when the request is not stored). */
  putDecision(threadId: string, requestId: string, decision: unknown): void
  /** The approval requests of the thread stored without a decision, in no particular order. */
  undecided(threadId: string): string[]
  /** Stores a recovery escalation for a person to find next to the thread. */
  putEscalation(threadId: string, escalation: unknown): void
  /**
   * Where a person answers approval request `requestId`: a file, relative to the data directory, or
   * in a database the answer's `ref` (what `leaveRequest` writes to); null where no one outside
   * this process can.
   */
  answerAt(threadId: string, requestId: string): string | null
  /**
   * Leaves a cancel request for whichever process runs the thread, carrying its nonce; returns
   * where. Null when no other process reads this inbox (a request could never be acted on).
   */
  askCancel(threadId: string, request: { nonce: string; reason?: string; by?: string }): string | null
  /**
   * Leaves a request for whichever process runs or watches the thread, as writers outside it do
   * (the CLI, the inspector, a script, a runtime cancelling a thread another process runs): `body`
   * is what `claim` reads back, and what the request's checks (src/thread/requests.ts) have passed
   * already. It replaces a request of the same kind (an answer to the same request) still waiting,
   * not one claimed. Returns where it was left (its `ref`). Durable when it returns, and announced:
   * `changed()` of every process sharing the inbox names the thread.
   */
  leaveRequest(threadId: string, kind: RequestKind, body: unknown, requestId?: string): string
  /**
   * True when `changed` names every thread a request was left for (no request can arrive but
   * through `leaveRequest`, as in a database): a poller looks nowhere else.
   */
  readonly complete?: boolean
  /** Threads whose requests changed since the last call (and `missed`: look at every thread, some changes were not seen). */
  changed(): { ids: Set<string>; missed: boolean }
  /** Whether the thread has a request of `kind` waiting (an approval answer: one answering `requestId`). */
  waiting(threadId: string, kind: RequestKind, requestId?: string): boolean
  /**
   * Claims the waiting request, so no other process acts on it, and reads it. Null when there is
   * none to claim (another process took it first), or when it may not be touched (it lies behind
   * a link: reported through the inbox's own problem port).
   */
  claim(threadId: string, kind: RequestKind, requestId?: string): ClaimedRequest | null
  /**
   * Requests a process claimed and did not carry out before it stopped for good (killed between
   * the two), claimed again by this one to act on now. A claim of a live process, or of one that
   * may be alive (another host's), is never among them; none where no other process shares the
   * inbox.
   */
  abandoned(): ClaimedRequest[]
  /** A claimed request was carried out: it is gone from the inbox. */
  honour(request: ClaimedRequest): void
  /**
   * A request that was refused (claimed, or found stray and not claimed) is set aside, so whoever
   * wrote it can see it was not taken; returns where it is kept now (null: it could not be moved).
   */
  refuse(request: InboxRequest): string | null
  /** Cancel requests waiting for threads `passOver` does not name (threads that no process here runs or watches): a sweep's strays. */
  strayCancels(passOver: (threadId: string) => boolean): InboxRequest[]
  /**
   * Approval answers of the thread that answer no open request of it (`openRequest`: null when it
   * has none): already decided, or answering a request it never had. An answer to a request that
   * is open but not the one given (another process's) is not stray.
   */
  strayAnswers(threadId: string, openRequest: string | null): Array<InboxRequest & { decided: boolean }>
  /** Appends to the request log; returns why a line could not be written (the request stands all the same). */
  log(line: RequestLogLine): Error | null
  /**
   * The approval requests stored for the thread, each with its decision (null while undecided; a
   * request null when only its decision is stored), in request id order: a copy to another
   * backend (`spindle migrate`). Throws STATE_CORRUPT naming a document that cannot be read.
   */
  approvals(threadId: string): Array<{ requestId: string; request: unknown; decision: unknown }>
  /**
   * The requests waiting for the thread (left, not claimed), with what was written: read, not
   * claimed, so that a copy to another backend can leave them there. A request behind a link is
   * left out (reported as `claim` reports it).
   */
  unclaimed(threadId: string): Array<InboxRequest & { body: ClaimedRequest['body'] }>
}
