/**
 * `--inspect-stately`: every thread actor and the orchestrator watched in the Stately inspector
 * (@statelyai/inspect). That inspector runs on stately.ai, so everything a thread holds goes off
 * this machine; the flag says so in its name, and the notice below says where before anything is
 * sent. `spindle inspect` (a page on 127.0.0.1) is the way to watch that keeps it here.
 */
import type { InspectionEvent } from 'xstate'
import { SpindleError } from '../base/errors.js'

/**
 * Where `createSkyInspector` of @statelyai/inspect sends the events, and where its session page
 * is. Written out here so the notice names them before the library is even loaded; a test checks
 * the installed library still has them.
 */
export const STATELY_RELAY_HOST = 'stately-sky-beta.mellson.partykit.dev'
export const STATELY_SESSION_PAGE = 'https://stately.ai/registry/inspect/'

/** What a person reads before `--inspect-stately` sends anything. */
export const STATELY_NOTICE =
  `--inspect-stately: every snapshot of every thread — prompts, model replies, tool inputs and results, errors — ` +
  `is sent over the internet to ${STATELY_RELAY_HOST}, the relay of the Stately inspector (@statelyai/inspect), ` +
  `and shown at ${STATELY_SESSION_PAGE}<session> to anyone with that link. ` +
  '`spindle inspect` shows the threads on a local page instead, and sends nothing off this machine.'

/** The refusal of the old `--inspect`, which sent the same off the machine without saying so. */
export function inspectRenamed(command: string): SpindleError {
  return new SpindleError(
    'INVALID_OPTIONS',
    `--inspect is now --inspect-stately: it sends every snapshot of every thread (prompts, tool results …) to the Stately inspector on stately.ai. ` +
      `To watch the threads on this machine, run \`spindle inspect\` (a local page) beside \`spindle ${command}\`; ` +
      `to send them to stately.ai, pass --inspect-stately. Nothing was started.`,
    { details: { field: 'inspect' } },
  )
}

/**
 * The Stately inspector, after `notify` has been given the notice: it prints the link to its
 * session page once connected, and reports a connection it cannot make through `onError`.
 */
export async function statelyInspector(
  notify: (text: string) => void,
  onError: (error: Error) => void,
): Promise<{ inspect: (event: InspectionEvent) => void; stop(): void }> {
  notify(STATELY_NOTICE)
  const { createSkyInspector } = await import('@statelyai/inspect')
  const inspector = createSkyInspector({ onerror: onError })
  const observer = inspector.inspect as { next?: (event: InspectionEvent) => void }
  return { inspect: (event) => observer.next?.(event), stop: () => inspector.stop() }
}
