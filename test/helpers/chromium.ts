/**
 * Headless Chromium for the tests that look at what a person sees: Debian's package, driven by
 * playwright-core (which downloads no browser of its own).
 */
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Browser } from 'playwright-core'
import { chromium } from 'playwright-core'

export const CHROMIUM = process.env.SPINDLE_CHROMIUM ?? '/usr/bin/chromium'

/** Chromium, or an error that says how to get it (a test that needs it fails rather than passing unseen). */
export async function launchChromium(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(
      `This test renders in headless Chromium, and there is none at ${CHROMIUM}. Install Debian's package ` +
        '(`apt-get install chromium`, as .ci/run does) or point SPINDLE_CHROMIUM at a Chromium binary.',
    )
  }
  // --no-sandbox: the tests run as root here, where Chromium's sandbox refuses to start.
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] })
}

/** Mermaid's self-contained browser bundle, from node_modules (a devDependency). */
export function mermaidBundle(): string {
  return createRequire(import.meta.url).resolve('mermaid/dist/mermaid.min.js')
}

/**
 * Where the browser tests keep their screenshots: `artifacts/inspector/` at the repository root
 * (CI keeps the folder as a build artifact; SPINDLE_ARTIFACTS moves it). Made on first use.
 */
export function screenshotPath(name: string): string {
  const root = process.env.SPINDLE_ARTIFACTS ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../artifacts')
  const folder = path.join(root, 'inspector')
  fs.mkdirSync(folder, { recursive: true })
  return path.join(folder, `${name}.png`)
}
