/**
 * Storage contracts: one interface per concern (checkpoints, transcript, registry), one
 * implementation per backend behind each. Side effects live behind these; nothing here knows
 * about machines beyond "a persisted snapshot is JSON".
 */

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
  v: 2
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

export interface CheckpointStore {
  /** Stage the newest envelope of a thread; a later stage of the same thread replaces it. */
  stage(threadId: string, envelope: StateEnvelope): void
  /**
   * Write every staged envelope atomically (temp file, rename). With durability 'fsync' the temp
   * file is fsynced before the rename and the directory after it, so a returned promise means the
   * new state.json survives power loss; with 'process' it survives a process crash only.
   * `beforePublish`: called once the batch is taken; temp files are written and synced at once,
   * but renamed into place only after its promise resolves (group commit passes a transcript sync,
   * so a state.json never points past a transcript that is not yet durable).
   */
  sync(options?: { beforePublish?: () => Promise<unknown> }): Promise<void>
  /** The stored envelope, null when the thread has none. Throws STATE_CORRUPT naming the file. */
  load(threadId: string): StateEnvelope | null
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
}

export interface TranscriptStore {
  /**
   * Open a thread's transcript for appending. Without `from`, a missing transcript is created
   * empty and an existing one is read and verified in full. With `from` (the position recorded in
   * state.json) only the bytes after it are read and verified, chained to `from.hash`.
   * A torn last line is tolerated: it is moved aside to a side file and cut off.
   * Throws TRANSCRIPT_CHAIN_BROKEN (details.seq) or TRANSCRIPT_CORRUPT (details.path) otherwise.
   */
  open(threadId: string, from?: TranscriptPosition): TranscriptOpenResult
  /**
   * Append an entry to an open transcript. The bytes are handed to the OS before this returns
   * (they survive a process crash); `sync()` makes them survive power loss.
   */
  append(threadId: string, type: string, data: unknown, ts?: Date): TranscriptEntry
  position(threadId: string): TranscriptPosition
  /** fsync every transcript appended to since the last sync (no-op for durability 'process'). */
  sync(): Promise<void>
  /** Read and verify a transcript without opening it for append. */
  read(threadId: string): { entries: TranscriptEntry[]; torn: { bytes: number } | null }
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
  nonce: string
  /** ms since epoch */
  createdAt: number
  /** ms since epoch */
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

export interface Registry {
  register(thread: RegisterThread): void
  updateStatus(id: string, status: ThreadStatus, at: number): void
  get(id: string): ThreadRecord | null
  setResult(id: string, outcome: { result?: unknown; error?: { code: string; message: string } | null }): void
  updateCostSnapshot(id: string, cost: Cost): void
  /** Threads in status created or running. */
  listActive(): ThreadRecord[]
  /** The same threads, only id and status: what recovery needs, without parsing every row's JSON. */
  activeStatuses(): Array<{ id: string; status: ThreadStatus }>
  list(filter?: { status?: ThreadStatus | ThreadStatus[]; limit?: number }): ThreadRecord[]
  listChildren(id: string): ThreadRecord[]
  /** The continuation chain that `id` belongs to, oldest first (follows previous_thread_id both ways). */
  chain(id: string): ThreadRecord[]
  /** Run `fn` in one transaction (better-sqlite3 transactions are synchronous). */
  transaction<T>(fn: () => T): T
  close(): void
}

export type Durability = 'fsync' | 'process'
