/**
 * Writes docs/configuration-reference.md from the schema and the shipped defaults (`npm run docs`).
 */
import fs from 'node:fs'
import path from 'node:path'
import { systemDefaults } from './load.js'
import { renderConfigReference } from './reference.js'
import { ConfigSchema } from './schema.js'

/** The package root: the nearest directory above this module with a package.json (from config/ or dist/config/). */
function packageRoot(): string {
  let dir = import.meta.dirname
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir)
    if (up === dir) throw new Error(`No package.json above ${import.meta.dirname}: run this from spindle's source tree.`)
    dir = up
  }
  return dir
}

const file = path.join(packageRoot(), 'docs', 'configuration-reference.md')
fs.mkdirSync(path.dirname(file), { recursive: true })
fs.writeFileSync(file, renderConfigReference(ConfigSchema, systemDefaults()))
process.stdout.write(`wrote ${path.relative(process.cwd(), file) || file}\n`)
