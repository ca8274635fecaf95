/**
 * The script of the bridge's worker thread (see bridge.ts): it holds the process's connections to
 * PostgreSQL and runs what the bridge posts.
 *
 * - The **main connection** runs the synchronous calls, in the order they were posted, and
 *   listens for notifications. A synchronous transaction spans several messages on it.
 * - Each **lane** (`run(ops, { lane })`: the transcript rounds, the checkpoint rounds) has a
 *   connection of its own, up to `connections - 1` of them (lanes share them beyond that), opened
 *   at its first message. A lane's messages run in the order they were posted, so one store's
 *   rounds never overtake each other; different lanes and the main connection run side by side, so
 *   a synchronous statement never waits for a round's commit, nor one store's round for another's.
 *
 * The worker reconnects after a lost connection (a server restart, `pg_terminate_backend`): the
 * statement that found it lost fails, and so does everything up to the end of a synchronous
 * transaction the lost connection had begun; the next message connects again.
 *
 * Dynamic imports only: an eval worker is a CommonJS script, or a module when the host runs with
 * --input-type=module, and import() works in both.
 */
export const WORKER_SCRIPT = `
(async () => {
const { workerData } = await import('node:worker_threads')
const { port, flag, pgUrl, url, connectTimeoutMs, statementTimeoutMs, idleInTransactionTimeoutMs, connections } = workerData
let schema = workerData.schema
// Bumped by a schema message: every connection sets its search_path again before its next message.
let schemaGeneration = 0
let pg
try { pg = (await import(pgUrl)).default } catch (e) {
  // Every call fails at once with the reason, rather than waiting out its timeout.
  port.on('message', (m) => { port.postMessage({ id: m.id, error: { message: 'the pg package could not be loaded: ' + e.message } }); Atomics.add(flag, 0, 1); Atomics.notify(flag, 0) })
  return
}
const { prepareValue, escapeLiteral } = (await import(new URL('./utils.js', pgUrl).href)).default
// Milliseconds and counters are int8 columns: numbers here, as SQLite gives them.
pg.types.setTypeParser(20, (v) => Number(v))
function connection(main) { return { main, client: null, connecting: null, generation: -1, queue: Promise.resolve() } }
const main = connection(true)
const pool = []
const lanes = new Map()
function laneConnection(name) {
  let conn = lanes.get(name)
  if (conn) return conn
  if (pool.length < connections - 1) pool.push(conn = connection(false))
  else conn = pool.length > 0 ? pool[lanes.size % pool.length] : main
  lanes.set(name, conn)
  return conn
}
// The main connection's synchronous transaction: open, and lost before its end.
let txLost = false
let inTx = false
const channels = new Set()
function quote(name) { return '"' + String(name).replace(/"/g, '""') + '"' }
async function useSchema(c) {
  await c.query('CREATE SCHEMA IF NOT EXISTS ' + quote(schema)).catch((e) => { if (e.code !== '23505' && e.code !== '42P06') throw e })
  await c.query('SET search_path TO ' + quote(schema))
}
async function connected(conn) {
  if (conn.client) {
    if (conn.generation !== schemaGeneration && schema) { await useSchema(conn.client); conn.generation = schemaGeneration }
    return conn.client
  }
  if (conn.connecting) return conn.connecting
  conn.connecting = (async () => {
    const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: connectTimeoutMs, statement_timeout: statementTimeoutMs, idle_in_transaction_session_timeout: idleInTransactionTimeoutMs, application_name: 'spindle' })
    const gone = () => { if (conn.client === c) { conn.client = null; if (conn.main && inTx) txLost = true } }
    c.on('error', gone)
    c.on('end', gone)
    if (conn.main) c.on('notification', (n) => port.postMessage({ id: 0, notify: { channel: n.channel, payload: n.payload ?? '' } }))
    try {
      await c.connect()
      const generation = schemaGeneration
      if (schema) await useSchema(c)
      conn.generation = generation
      if (conn.main) for (const channel of channels) await c.query('LISTEN ' + quote(channel))
    } catch (e) { c.end().catch(() => {}); throw e }
    conn.client = c
    return c
  })()
  try { return await conn.connecting } finally { conn.connecting = null }
}
// A parameter as a literal of unknown type, which the server types from where it stands, as it
// types a parameter; undefined for what is not written as text (a Buffer).
function literal(value) {
  if (value === null || value === undefined) return 'NULL'
  if (Buffer.isBuffer(value) || ArrayBuffer.isView(value)) return undefined
  return escapeLiteral(String(prepareValue(value)))
}
// The statement with its parameters written in, or undefined; $n inside quotes is left alone.
function inline(sql, params) {
  if (!params || params.length === 0) return sql
  let out = ''
  let quote = null
  for (let i = 0; i < sql.length; i++) {
    const ch = sql[i]
    if (quote) { out += ch; if (ch === quote) quote = null; continue }
    if (ch === "'" || ch === '"') { quote = ch; out += ch; continue }
    if (ch === '$' && /[0-9]/.test(sql[i + 1] ?? '')) {
      let j = i + 1
      while (/[0-9]/.test(sql[j] ?? '')) j++
      const value = literal(params[Number(sql.slice(i + 1, j)) - 1])
      if (value === undefined) return undefined
      out += value
      i = j - 1
      continue
    }
    out += ch
  }
  return out
}
// Statements whose results nobody reads (a transaction's deferred writes), in one round trip: one
// query text of many statements runs them in order, stopping at the first that fails.
async function runQuiet(c, ops) {
  const texts = []
  for (const s of ops) {
    const text = inline(s.sql, s.params)
    if (text === undefined) { for (const t of ops) await c.query(t.sql, t.params); return }
    texts.push(text)
  }
  await c.query(texts.join(';\\n'))
}
function lost(conn, e) { return !conn.client || e.code === '57P01' || e.code === '57P02' || e.code === '57P03' || e.code === '25P03' || e.code === '08006' || e.code === '08003' || e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET' || e.code === 'EPIPE' || /Connection terminated|not queryable|timeout expired/i.test(String(e.message)) }
async function closeAll() {
  await Promise.all(pool.map((conn) => conn.queue))
  await Promise.all([main, ...pool].map(async (conn) => { const c = conn.client; conn.client = null; if (c) await c.end().catch(() => {}) }))
}
async function handle(conn, m) {
  if (m.close) { await closeAll(); return { id: m.id, rows: [], counts: [] } }
  if (m.schema) { schema = m.schema; schemaGeneration++; await connected(conn); return { id: m.id, rows: [], counts: [] } }
  if (m.listen) { channels.add(m.listen); const c = await connected(conn); await c.query('LISTEN ' + quote(m.listen)); return { id: m.id, rows: [], counts: [] } }
  if (m.begin) { txLost = false; inTx = true }
  if (conn.main && txLost && inTx) {
    if (m.end) { inTx = false; txLost = false; if (m.rollback) return { id: m.id, rows: [], counts: [] } }
    throw Object.assign(new Error('the connection to the database was lost in the middle of a transaction; nothing of it was committed'), { lostTx: true })
  }
  const c = await connected(conn)
  const rows = []
  const counts = []
  const wrap = m.tx && !m.begin
  if (wrap) await c.query('BEGIN')
  try {
    const quiet = m.quiet > 1 ? m.quiet : 0
    if (quiet > 0) {
      await runQuiet(c, m.ops.slice(0, quiet))
      for (let i = 0; i < quiet; i++) { rows.push([]); counts.push(0) }
    }
    for (const s of m.ops.slice(quiet)) {
      const r = await c.query(s.sql, s.params)
      // COMMIT of a transaction a failed statement aborted rolls it back without an error: say so.
      if (s.sql === 'COMMIT' && r.command === 'ROLLBACK') throw Object.assign(new Error('the transaction was rolled back at its commit: a statement in it had failed'), { code: '25P02' })
      rows.push(r.rows ?? [])
      counts.push(r.rowCount ?? 0)
    }
    if (wrap) await c.query('COMMIT')
  } catch (e) {
    // A run's own transaction ends here. A synchronous one stays open (aborted, as PostgreSQL
    // leaves it): its caller rolls it back, or back to a savepoint, and goes on.
    if (wrap) await c.query('ROLLBACK').catch(() => {})
    throw e
  } finally {
    if (m.end) inTx = false
  }
  return { id: m.id, rows, counts }
}
port.on('message', (m) => {
  const conn = m.lane ? laneConnection(m.lane) : main
  conn.queue = conn.queue.then(async () => {
    let reply
    try { reply = await handle(conn, m) } catch (e) {
      // A BEGIN that failed began nothing (its caller sends no ROLLBACK), and a COMMIT or ROLLBACK
      // that failed (reconnecting, say) ended it: were it still counted as open, the next lost
      // connection would fail every later statement as part of it, for ever.
      if (m.begin || m.end) { inTx = false; txLost = false }
      const isLost = e.lostTx === true || lost(conn, e)
      if (isLost && conn.client) { const c = conn.client; conn.client = null; c.end().catch(() => {}) }
      reply = { id: m.id, error: { message: String(e && e.message || e), code: e && e.code, lost: isLost } }
    }
    port.postMessage(reply)
    Atomics.add(flag, 0, 1)
    Atomics.notify(flag, 0)
  })
})
})()
`
