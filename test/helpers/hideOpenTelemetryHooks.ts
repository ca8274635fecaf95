/** Module resolve hook for hideOpenTelemetry.ts: `@opentelemetry/*` is not found, as when not installed. */
interface ResolveContext {
  parentURL?: string
}
type NextResolve = (specifier: string, context: ResolveContext) => Promise<unknown>

export async function resolve(specifier: string, context: ResolveContext, nextResolve: NextResolve): Promise<unknown> {
  if (specifier.startsWith('@opentelemetry/')) {
    const error = new Error(`Cannot find package '${specifier}' imported from ${context.parentURL ?? 'the host'}`) as Error & { code: string }
    error.code = 'ERR_MODULE_NOT_FOUND'
    throw error
  }
  return nextResolve(specifier, context)
}
