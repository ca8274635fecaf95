/**
 * The process's connections to PostgreSQL, which the stores can use synchronously, as they use SQLite.
 *
 * The store interfaces are synchronous (better-sqlite3 is), and the runtime relies on that: a
 * registry read or a lease taken is done when the call returns. `pg` is asynchronous, so the
 * connections live in a worker thread (bridgeWorker.ts) and a synchronous call posts its
 * statements there and blocks on an `Atomics.wait` until the worker answers — the same cost model
 * as better-sqlite3, which also blocks the event loop for its statements. Group-commit rounds use
 * `run`, which does not block, each store's rounds on a lane of their own: a synchronous statement
 * does not wait behind a round's commit, and the rounds of one store stay in order.
 *
 * A lost connection (a server restart, `pg_terminate_backend`) fails the statement that found it
 * with DATABASE_UNAVAILABLE, and so does everything up to the end of a transaction it had begun;
 * the next call connects again.
 */
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads'
import { SpindleError } from '../../src/base/errors.js'
import { WORKER_SCRIPT } from './bridgeWorker.js'

/** One statement: its SQL and its parameters ($1, $2 …). Objects are passed as JSON. */
export interface Statement {
  sql: string
  params?: readonly unknown[]
}

export type Row = Record<string, unknown>

export interface PgBridgeOptions {
  /** A `postgres://` URL. */
  url: string
  /** Every table lives in this schema (created when missing); `public` when not given. */
  schema?: string
  /** How long a synchronous call waits for the database before it fails (ms). */
  timeoutMs?: number
  /** How long connecting may take before a call fails (ms). */
  connectTimeoutMs?: number
  /**
   * How long the server keeps this connection's transaction open while it waits for the next
   * statement (ms) before it ends the session. Spindle's transactions never wait for anything but
   * the process that runs them, so a longer wait means that process is stopped (frozen, paused,
   * cut off); the row locks it holds would hold up every other process that takes its threads
   * over, for as long as it stays stopped. Default 2000.
   */
  idleInTransactionTimeoutMs?: number
  /**
   * How many connections the process holds at most (default 3): one for the synchronous calls and
   * the notifications, and one for each lane of `run` (the transcript rounds, the checkpoint
   * rounds), opened when first used. 1: everything on one connection, in the order posted.
   */
  connections?: number
  /** Told of each NOTIFY on the channels `listen` named (asynchronously, between calls). */
  onNotify?: (channel: string, payload: string) => void
}

interface Reply {
  id: number
  rows?: Row[][]
  counts?: number[]
  error?: { message: string; code?: string; lost?: boolean }
  notify?: { channel: string; payload: string }
}

/** A PostgreSQL connection usable synchronously and asynchronously; see the file comment. */
export class PgBridge {
  private readonly worker: Worker
  private readonly port: MessagePort
  private readonly flag: Int32Array
  private readonly timeoutMs: number
  private readonly pending = new Map<number, { resolve: (reply: Reply) => void }>()
  private readonly onNotify: ((channel: string, payload: string) => void) | undefined
  private nextId = 1
  private depth = 0
  private closed = false
  /** Writes of the open transaction whose results nobody reads: sent with the next statement that is read, or the commit. */
  private deferred: Statement[] = []
  /** The open transaction's BEGIN has not been sent yet: it goes with its first statement. */
  private beginPending = false
  readonly url: string
  private currentSchema: string | undefined

  constructor(options: PgBridgeOptions) {
    this.url = options.url
    this.currentSchema = options.schema
    this.timeoutMs = options.timeoutMs ?? 30_000
    this.flag = new Int32Array(new SharedArrayBuffer(4))
    const { port1, port2 } = new MessageChannel()
    this.port = port1
    const pgUrl = pathToFileURL(createRequire(import.meta.url).resolve('pg')).href
    this.worker = new Worker(WORKER_SCRIPT, {
      eval: true,
      workerData: { port: port2, flag: this.flag, pgUrl, url: options.url, schema: options.schema, connectTimeoutMs: options.connectTimeoutMs ?? 5_000, statementTimeoutMs: this.timeoutMs, idleInTransactionTimeoutMs: options.idleInTransactionTimeoutMs ?? 2_000, connections: Math.max(1, options.connections ?? 3) },
      transferList: [port2],
    })
    this.worker.on('error', () => {})
    this.worker.unref()
    this.onNotify = options.onNotify
    port1.on('message', (reply: Reply) => this.dispatch(reply))
    port1.unref()
  }

  /** Runs statements in order and returns each one's rows, blocking until the database answers. */
  batchSync(ops: readonly Statement[]): Row[][] {
    const all = this.withDeferred(ops)
    return this.sendSync({ ops: all, quiet: all.length - ops.length }).slice(-ops.length)
  }

  /** One statement's rows, blocking; `lane`: read on that lane's connection, after its runs. */
  querySync(sql: string, params?: readonly unknown[], options: { lane?: string } = {}): Row[] {
    const statement = { sql, ...(params ? { params } : {}) }
    // On a lane: after the runs posted to it before, outside any transaction of the main connection.
    if (options.lane !== undefined) return this.sendSync({ ops: [statement], lane: options.lane })[0]!
    return this.batchSync([statement])[0]!
  }

  /** How many rows one statement changed, blocking. */
  changeSync(sql: string, params?: readonly unknown[]): number {
    const ops = this.withDeferred([{ sql, ...(params ? { params } : {}) }])
    const reply = this.postSync({ ops, quiet: ops.length - 1 })
    return reply.counts![reply.counts!.length - 1]!
  }

  /**
   * A write whose result nobody reads. Inside `transactionSync` it is sent with the next statement
   * that is read, or with the commit (one message for many writes); outside, at once.
   */
  execSync(sql: string, params?: readonly unknown[]): void {
    const statement = { sql, ...(params ? { params } : {}) }
    if (this.depth > 0) this.deferred.push(statement)
    else this.batchSync([statement])
  }

  /**
   * Runs `fn` in one transaction (nested calls run in savepoints): committed when it returns,
   * rolled back when it throws.
   */
  transactionSync<T>(fn: () => T): T {
    if (this.depth > 0) {
      const name = `sp${this.depth}`
      this.deferred.push({ sql: `SAVEPOINT ${name}` })
      this.depth++
      try {
        const value = fn()
        this.deferred.push({ sql: `RELEASE SAVEPOINT ${name}` })
        return value
      } catch (error) {
        this.deferred.push({ sql: `ROLLBACK TO SAVEPOINT ${name}` })
        throw error
      } finally {
        this.depth--
      }
    }
    // BEGIN waits for the transaction's first statement: one round trip fewer per transaction.
    this.deferred = [{ sql: 'BEGIN' }]
    this.beginPending = true
    this.depth = 1
    try {
      const value = fn()
      const ops = this.withDeferred([{ sql: 'COMMIT' }])
      this.sendSync({ ops, quiet: ops.length - 1, end: true })
      return value
    } catch (error) {
      this.deferred = []
        const begun = !this.beginPending
      this.beginPending = false
      if (begun) {
        try {
          this.sendSync({ ops: [{ sql: 'ROLLBACK' }], end: true, rollback: true })
        } catch {
          // The connection is gone: so is the transaction.
        }
      }
      throw error
    } finally {
      this.depth = 0
    }
  }

  /**
   * Runs statements in order without blocking; `tx`: in one transaction. The runs of one `lane`
   * keep the order they were posted in, on a connection of their own: they never wait for the
   * synchronous calls, nor those for them (without a lane: on the main connection, in order with
   * the synchronous calls).
   */
  async run(ops: readonly Statement[], options: { tx?: boolean; lane?: string } = {}): Promise<Row[][]> {
    if (this.depth > 0 && options.lane === undefined) throw new Error('PgBridge.run inside a synchronous transaction')
    const reply = await this.post({ ops, tx: options.tx === true, ...(options.lane ? { lane: options.lane } : {}) })
    if (reply.error) throw this.failure(reply.error, ops)
    return reply.rows!
  }

  /** The schema every table is in (undefined: the server's search_path, normally `public`). */
  get schema(): string | undefined {
    return this.currentSchema
  }

  get isClosed(): boolean {
    return this.closed
  }

  /**
   * Moves the connection to another schema (created when missing), also for every reconnect: tests
   * reuse one connection for many fresh schemas rather than pay for a worker and a connection each.
   */
  useSchema(schema: string): void {
    this.postSync({ schema })
    this.currentSchema = schema
  }

  /** Listens to a NOTIFY channel (again after every reconnect); notifications reach `onNotify`. */
  listenSync(channel: string): void {
    this.postSync({ listen: channel })
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    try {
      this.sendSync({ close: true }, 5_000)
    } catch {
      // Closing regardless: the worker goes with its connection.
    }
    void this.worker.terminate()
    this.port.close()
  }

  private withDeferred(ops: readonly Statement[]): Statement[] {
    if (this.deferred.length === 0) return ops as Statement[]
    const all = [...this.deferred, ...ops]
    this.deferred = []
    return all
  }

  private sendSync(message: Record<string, unknown>, timeoutMs = this.timeoutMs): Row[][] {
    return this.postSync(message, timeoutMs).rows!
  }

  private postSync(message: Record<string, unknown>, timeoutMs = this.timeoutMs): Reply {
    if (this.closed && !message.close) throw new SpindleError('RUNTIME_CLOSED', 'The database connection is closed.')
    if (this.beginPending && message.ops && message.lane === undefined) {
      // This batch carries the transaction's BEGIN (at its head, from `deferred`).
      message = { ...message, begin: true }
      this.beginPending = false
    }
    const id = this.nextId++
    let reply: Reply | undefined
    this.pending.set(id, { resolve: (r) => (reply = r) })
    this.port.postMessage({ id, ...message })
    const deadline = Date.now() + timeoutMs + 1_000
    while (!reply) {
      const seen = Atomics.load(this.flag, 0)
      let received = receiveMessageOnPort(this.port)
      while (received) {
        this.dispatch(received.message as Reply, true)
        received = receiveMessageOnPort(this.port)
      }
      if (reply) break
      const left = deadline - Date.now()
      if (left <= 0) {
        this.pending.delete(id)
        throw new SpindleError('DATABASE_UNAVAILABLE', `The database at ${redact(this.url)} did not answer within ${Math.round(timeoutMs / 1000)} s. Check that it is running and reachable; spindle tries again.`, {
          details: { url: redact(this.url) },
        })
      }
      Atomics.wait(this.flag, 0, seen, Math.min(left, 1_000))
    }
    const done = reply as Reply
    if (done.error) throw this.failure(done.error, (message.ops as Statement[] | undefined) ?? [])
    return done
  }

  private post(message: Record<string, unknown>): Promise<Reply> {
    if (this.closed) return Promise.reject(new SpindleError('RUNTIME_CLOSED', 'The database connection is closed.'))
    const id = this.nextId++
    // Held while a reply is awaited: an event loop with nothing else to do must not end the process under it.
    if (this.pending.size === 0) this.worker.ref()
    return new Promise((resolve) => {
      this.pending.set(id, { resolve })
      this.port.postMessage({ id, ...message })
    })
  }

  /**
   * `inCall`: taken off the port by a synchronous call waiting for its own reply. A notification
   * met there is told on the next turn of the event loop: told at once, its listener would run in
   * the middle of the call (inside its transaction, perhaps).
   */
  private dispatch(reply: Reply, inCall = false): void {
    const notify = reply.notify
    if (notify) {
      if (inCall) setImmediate(() => this.onNotify?.(notify.channel, notify.payload))
      else this.onNotify?.(notify.channel, notify.payload)
      return
    }
    const waiter = this.pending.get(reply.id)
    if (!waiter) return
    this.pending.delete(reply.id)
    if (this.pending.size === 0) this.worker.unref()
    waiter.resolve(reply)
  }

  private failure(error: NonNullable<Reply['error']>, ops: readonly Statement[]): Error {
    if (error.lost || /ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|timeout/i.test(error.message + (error.code ?? ''))) {
      return new SpindleError('DATABASE_UNAVAILABLE', `The database at ${redact(this.url)} could not be reached: ${error.message}. Check that it is running and reachable; spindle tries again.`, {
        details: { url: redact(this.url), ...(error.code ? { pgCode: error.code } : {}) },
      })
    }
    const last = ops[ops.length - 1]
    return Object.assign(new Error(`${error.message}${last ? ` (in: ${last.sql.slice(0, 120)})` : ''}`), { code: error.code })
  }
}

/** The URL without its password, for messages. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = '***'
    return parsed.toString()
  } catch {
    return 'the configured database'
  }
}
