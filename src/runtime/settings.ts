/**
 * Options → settings: the merged, validated configuration a runtime runs with (shipped defaults,
 * user file, project file, options), its compiled hooks, and its tool table.
 */
import { SpindleError, midSentence } from '../base/errors.js'
import type { Tool } from '../../actors/tools.js'
import { loadFileLayers, mergeConfig, systemDefaults, userConfigFile } from '../../config/load.js'
import { ConfigLayerSchema } from '../../config/schema.js'
import type { Config, ConfigLayer } from '../../config/schema.js'
import type { CompiledHooks, HookSet } from '../policies/hooks.js'
import { compileHooks } from '../policies/hooks.js'
import type { RuntimeOptions } from './api.js'
import type { Reporter } from './events.js'

/** Validates a layer of options against the configuration schema, naming the field that is wrong. */
export function validateLayer(layer: ConfigLayer, where: string): ConfigLayer {
  const result = ConfigLayerSchema.safeParse(layer)
  if (result.success) return result.data
  const issue = result.error.issues[0]!
  const field = issue.path.join('.')
  throw new SpindleError('INVALID_OPTIONS', `${where}: ${field} ${midSentence(issue.message)} (got ${JSON.stringify(fieldValue(layer, issue.path))}).`, {
    details: { field },
  })
}

function fieldValue(value: unknown, at: ReadonlyArray<PropertyKey>): unknown {
  return at.reduce<unknown>((v, key) => (v && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[key] : undefined), value)
}

export interface Settings {
  config: Config
  /** The hooks of every layer but the directives'. */
  hooks: CompiledHooks
}

/** The configuration of a runtime opened on data directory `root` with `options`, and its hooks. */
export function resolveSettings(options: RuntimeOptions, root: string, bus: Reporter): Settings {
  const files = loadFileLayers(root, options.userConfig === undefined ? userConfigFile() : options.userConfig)
  const config = mergeConfig(
    files.config,
    options.config === undefined ? undefined : validateLayer(options.config, 'createRuntime options.config'),
    validateLayer({ limits: options.defaultLimits, retry: options.retry, timeouts: options.timeouts }, 'createRuntime options'),
  )
  const hookSets: HookSet[] = []
  for (const { kind, file, layer } of files.layers) {
    if (layer.hooks?.length) hookSets.push({ layer: kind, source: file, hooks: layer.hooks })
  }
  const builtinHooks = systemDefaults().hooks
  if (builtinHooks.length) hookSets.push({ layer: 'builtin', source: 'config/defaults.yaml', hooks: builtinHooks })
  if (options.config?.hooks?.length) hookSets.push({ layer: 'project', source: 'createRuntime options.config', hooks: options.config.hooks })
  if (options.hooks?.length) hookSets.push({ layer: 'project', source: 'createRuntime options.hooks', hooks: options.hooks })
  const hooks = compileHooks(hookSets, { onError: (problem) => bus.report(new SpindleError('HOOK_FAILED', `${problem.source}: hook ${problem.hookId}: ${problem.message}`)) })
  return { config, hooks }
}

/** The runtime's tools by name: the built-in ones first, then the host's; a name used twice is refused. */
export function toolTable(builtin: readonly Tool[], own: readonly Tool[]): Map<string, Tool> {
  const tools = new Map<string, Tool>()
  for (const tool of [...builtin, ...own]) {
    if (tools.has(tool.name)) {
      const builtinName = builtin.some((b) => b.name === tool.name)
      throw new SpindleError('INVALID_OPTIONS', builtinName
        ? `A tool is named "${tool.name}", like spindle's built-in tool; rename it, or pass builtinTools: false.`
        : `Two tools are named "${tool.name}"; tool names must be unique.`, {
        details: { field: 'tools' },
      })
    }
    tools.set(tool.name, tool)
  }
  return tools
}
