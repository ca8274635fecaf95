/**
 * The `telemetry` option of `createRuntime`, apart from tracing.ts so that the public types name
 * nothing of `@opentelemetry/api`, which a host need not install.
 */

/** A tracer provider: the SDK's (`NodeTracerProvider`, `BasicTracerProvider`) or any other. */
export interface TracerProviderLike {
  getTracer(name: string, version?: string): unknown
}

/** `createRuntime`'s `telemetry` option. */
export interface TelemetryOptions {
  /**
   * Put prompts, instructions, replies and tool inputs and outputs on the spans (default false).
   * They then go wherever the spans are exported: to the tracing backend, its storage and everyone
   * who may read it.
   */
  recordContent?: boolean
  /** The provider spindle takes its tracer from (default: the global one, `trace.getTracerProvider()`). */
  tracerProvider?: TracerProviderLike
}
