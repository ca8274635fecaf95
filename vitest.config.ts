import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['node_modules', 'dist', 'test/contract/**'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // A real PostgreSQL server for the Postgres backend's tests (started here unless one is given).
    globalSetup: ['test/setup/postgres.ts'],
    // Tests never read the developer's own ~/.config/spindle/config.yaml.
    env: { XDG_CONFIG_HOME: '/nonexistent/spindle-test-config' },
  },
})
