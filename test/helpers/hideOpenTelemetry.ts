/**
 * Preload (`node --import`) that makes `@opentelemetry/api` impossible to resolve, as in a project
 * that never installed it: the resolve hook in hideOpenTelemetryHooks.ts refuses it.
 */
import { register } from 'node:module'

register('./hideOpenTelemetryHooks.js', import.meta.url)
