/**
 * Preload for the benchmark with tracing on: registers the SDK's tracer provider (batched spans,
 * dropped by the exporter) and the async-hooks context manager, as a traced host would.
 *
 *   node --expose-gc --import ./dist/test/bench/tracedProvider.js dist/test/bench/workload.js turns <dir> memory 200 20
 *
 * Prints how many spans were exported to stderr on exit.
 */
import { context, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base'
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base'

let exported = 0
const exporter: SpanExporter = {
  export(spans: ReadableSpan[], done: (result: { code: number }) => void) {
    exported += spans.length
    done({ code: 0 })
  },
  shutdown: () => Promise.resolve(),
}
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter, { maxQueueSize: 100_000, maxExportBatchSize: 2048, scheduledDelayMillis: 200 })] })
trace.setGlobalTracerProvider(provider)
process.on('exit', () => process.stderr.write(`spans exported: ${exported}\n`))
