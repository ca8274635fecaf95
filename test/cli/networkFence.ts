/**
 * Preloaded (`node --import`) into a CLI the tests run with `--inspect-stately`: no connection
 * leaves the test machine. Each attempt is written to stderr as `network: connect <host>` — after
 * whatever the CLI wrote before it, which is what the test reads — and fails as an unreachable
 * host does.
 */
import net from 'node:net'

const connect = net.Socket.prototype.connect
net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
  const options = (typeof args[0] === 'object' && args[0] !== null ? args[0] : { host: args[1], port: args[0] }) as { host?: string; path?: string; port?: number }
  // Local pipes and sockets (a worker's IPC) are no network.
  if (options.path !== undefined || options.host === '127.0.0.1' || options.host === 'localhost') return connect.apply(this, args as never)
  process.stderr.write(`network: connect ${String(options.host)}:${String(options.port)}\n`)
  process.nextTick(() => this.destroy(Object.assign(new Error(`getaddrinfo ENOTFOUND ${String(options.host)} (network fenced off by the test)`), { code: 'ENOTFOUND' })))
  return this
} as typeof connect
