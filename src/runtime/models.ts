/**
 * The runtime's models by name: `createRuntime({ models: { default, fast, smart } })`, or a single
 * `model`, which is `default`. A thread names the one it runs on (its directive's `model`); the
 * name is recorded with it, so a thread carried on later calls the same kind of model.
 */
import type { ModelAdapter } from '../../actors/model.js'
import { SpindleError } from '../base/errors.js'

export const DEFAULT_MODEL = 'default'

const MODEL_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/

export class Models {
  constructor(private readonly byName: ReadonlyMap<string, ModelAdapter>) {}

  names(): string[] {
    return [...this.byName.keys()]
  }

  has(name: string): boolean {
    return this.byName.has(name)
  }

  /** The adapter of a thread's model name; MODEL_NOT_FOUND, naming the ones there are, when this runtime has none of that name. */
  get(name: string | undefined, threadId?: string): ModelAdapter {
    const adapter = this.byName.get(name ?? DEFAULT_MODEL)
    if (adapter) return adapter
    throw this.notFound(name!, threadId)
  }

  notFound(name: string, threadId?: string): SpindleError {
    const which = threadId ? `Thread ${threadId} runs on model "${name}", which` : `Model "${name}"`
    return new SpindleError(
      'MODEL_NOT_FOUND',
      `${which} is not one of this runtime's models (${this.names().join(', ')}). Name one of those, or pass "${name}" in createRuntime's \`models\`.`,
      { details: { model: name, models: this.names(), ...(threadId ? { threadId } : {}) } },
    )
  }
}

/** Checks `createRuntime`'s `model` / `models` options: exactly one of them, `default` among the names. */
export function modelsByName(options: { model?: unknown; models?: unknown }): Map<string, ModelAdapter> {
  const isAdapter = (value: unknown): value is ModelAdapter =>
    typeof value === 'object' && value !== null && typeof (value as ModelAdapter).generate === 'function'
  if (options.model !== undefined && options.models !== undefined) {
    throw invalid('model', 'createRuntime takes `model` or `models`, not both: put the single model under `models.default`.')
  }
  if (options.models === undefined) {
    if (!isAdapter(options.model)) {
      throw invalid('model', 'createRuntime needs `model`, a model adapter such as scriptedModel(script), or `models: { default, … }`.')
    }
    return new Map([[DEFAULT_MODEL, options.model]])
  }
  if (typeof options.models !== 'object' || options.models === null || Array.isArray(options.models)) {
    throw invalid('models', '`models` must be an object of model adapters by name, e.g. { default: scriptedModel(script), fast: … }.')
  }
  const byName = new Map<string, ModelAdapter>()
  for (const [name, adapter] of Object.entries(options.models)) {
    if (!MODEL_NAME.test(name)) throw invalid(`models.${name}`, `"${name}" is not a model name: letters, digits, ".", "-" and "_", starting with a letter or digit.`)
    if (!isAdapter(adapter)) throw invalid(`models.${name}`, `models.${name} is not a model adapter (an object with generate(request)).`)
    byName.set(name, adapter)
  }
  if (!byName.has(DEFAULT_MODEL)) {
    throw invalid('models', `\`models\` needs a \`default\`: the model of threads that name none (it has ${[...byName.keys()].join(', ') || 'none'}).`)
  }
  return byName
}

function invalid(field: string, message: string): SpindleError {
  return new SpindleError('INVALID_OPTIONS', message, { details: { field } })
}
