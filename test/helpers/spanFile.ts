/**
 * A span exporter that appends each finished span to a file as a line of JSON, written before
 * `export` returns: what a process killed with SIGKILL had ended is on disk for the test to read.
 */
import fs from 'node:fs'
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base'

/** A span as the file keeps it. */
export interface FiledSpan {
  name: string
  traceId: string
  spanId: string
  parentSpanId: string | null
  attributes: Record<string, unknown>
}

export function fileSpanExporter(file: string): SpanExporter {
  return {
    export(spans: ReadableSpan[], resultCallback: (result: { code: number }) => void): void {
      for (const span of spans) {
        const { traceId, spanId } = span.spanContext()
        const filed: FiledSpan = { name: span.name, traceId, spanId, parentSpanId: span.parentSpanContext?.spanId ?? null, attributes: { ...span.attributes } }
        fs.appendFileSync(file, `${JSON.stringify(filed)}\n`)
      }
      resultCallback({ code: 0 })
    },
    shutdown: () => Promise.resolve(),
  }
}

export function readSpanFile(file: string): FiledSpan[] {
  if (!fs.existsSync(file)) return []
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as FiledSpan)
}
