/**
 * Test hosts on this machine: each a network namespace with a virtual link (a veth pair) to the
 * test's own namespace, where the database listens, and a hostname of its own (a UTS namespace),
 * so a process started on it reaches the database over its link alone and cannot tell the other
 * hosts' processes apart from processes of another machine (lease owners on another host are not
 * checked by pid). Needs root and iproute2; `testHostsUnavailable()` says why they cannot be made.
 */
import { execFileSync } from 'node:child_process'

export interface TestHost {
  /** Its hostname, network namespace and this end's name of the link. */
  name: string
  namespace: string
  /** The address of the test's end of the link: where a server of the test is reached from the host. */
  gateway: string
  /** The host's own address. */
  address: string
}

export interface TestHosts {
  hosts: TestHost[]
  /** Every host's address (CIDR): the clients a server lets in. */
  clients: string
  /** The command that runs `file args…` on `host`: [file, args] for child_process.spawn. */
  command(host: TestHost, file: string, args: string[]): [string, string[]]
  remove(): void
}

/** The addresses of the links: a /16 of their own, one /30 per host. */
const NET = '10.231'

function run(file: string, args: string[]): string {
  return execFileSync(file, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
}

function failure(error: unknown): string {
  const e = error as { stderr?: string; message?: string }
  return (e.stderr || e.message || String(error)).trim()
}

/** Why test hosts cannot be made on this machine, or null when they can (tried with one, then removed). */
export function testHostsUnavailable(): string | null {
  if (process.platform !== 'linux') return `network namespaces are Linux's; this is ${process.platform}`
  if (process.getuid?.() !== 0) return 'making network namespaces and veth links needs root'
  let made: TestHosts | null = null
  try {
    made = makeTestHosts(1)
    const [file, args] = made.command(made.hosts[0]!, 'hostname', [])
    const name = run(file, args).trim()
    if (name !== made.hosts[0]!.name) return `a UTS namespace kept the hostname ${name}`
    return null
  } catch (error) {
    return failure(error)
  } finally {
    made?.remove()
  }
}

/** Makes `count` test hosts, each with its link up; `remove()` takes them down again. */
export function makeTestHosts(count: number): TestHosts {
  // Unique on the machine: other test runs may make hosts at the same time.
  const tag = `${process.pid % 100_000}`
  const used = new Set([...run('ip', ['-o', '-4', 'addr', 'show']).matchAll(new RegExp(`${NET.replace('.', '\\.')}\\.(\\d+)\\.`, 'g'))].map((m) => Number(m[1])))
  const free = Array.from({ length: 256 }, (_, i) => i).filter((i) => !used.has(i))
  const hosts: TestHost[] = []
  const remove = (): void => {
    for (const host of hosts) {
      // Removing the namespace removes its end of the link, and with it ours.
      try {
        run('ip', ['netns', 'del', host.namespace])
      } catch {}
      try {
        run('ip', ['link', 'del', `${host.name}h`])
      } catch {}
    }
  }
  try {
    for (let i = 0; i < count; i++) {
      const third = free[Math.floor(Math.random() * free.length)]
      if (third === undefined) throw new Error(`no free ${NET}.x.0/30 network for a test host`)
      free.splice(free.indexOf(third), 1)
      const host: TestHost = { name: `sw${tag}x${i}`, namespace: `spindle-${tag}-${i}`, gateway: `${NET}.${third}.1`, address: `${NET}.${third}.2` }
      hosts.push(host)
      run('ip', ['netns', 'add', host.namespace])
      run('ip', ['link', 'add', `${host.name}h`, 'type', 'veth', 'peer', 'name', `${host.name}n`])
      run('ip', ['link', 'set', `${host.name}n`, 'netns', host.namespace])
      run('ip', ['addr', 'add', `${host.gateway}/30`, 'dev', `${host.name}h`])
      run('ip', ['link', 'set', `${host.name}h`, 'up'])
      run('ip', ['netns', 'exec', host.namespace, 'ip', 'addr', 'add', `${host.address}/30`, 'dev', `${host.name}n`])
      run('ip', ['netns', 'exec', host.namespace, 'ip', 'link', 'set', `${host.name}n`, 'up'])
      run('ip', ['netns', 'exec', host.namespace, 'ip', 'link', 'set', 'lo', 'up'])
    }
  } catch (error) {
    remove()
    throw error
  }
  return {
    hosts,
    clients: `${NET}.0.0/16`,
    // `ip netns exec` and `unshare` exec what they run, so the pid spawn returns is the program's.
    command: (host, file, args) => [
      'ip',
      ['netns', 'exec', host.namespace, 'unshare', '--uts', '--', 'sh', '-c', 'hostname "$0" && exec "$@"', host.name, file, ...args],
    ],
    remove,
  }
}
