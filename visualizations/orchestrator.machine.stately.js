// Generated from machines/ by `spindle viz`; do not edit. Paste into Stately Studio (Import from code).
// Guards and actions are named here; what they do is in machines/orchestrator.machine.ts.
import { setup } from 'xstate'

export const machine = setup({
  guards: {
    isKnownThread: () => false,
    isTemporary: () => false,
    intensityExceeded: () => false,
  },
  actions: {
    reportCrash: () => {},
    giveUpUnknown: () => {},
    giveUpTemporary: () => {},
    giveUpGroup: () => {},
    restartByStrategy: () => {},
  },
}).createMachine({
  "id": "orchestrator",
  "initial": "recovering",
  "on": {
    "THREAD_CRASHED": [
      {
        "guard": "isTemporary",
        "actions": [
          "reportCrash",
          "giveUpTemporary"
        ]
      },
      {
        "guard": "intensityExceeded",
        "actions": [
          "reportCrash",
          "giveUpGroup"
        ]
      },
      {
        "guard": "isKnownThread",
        "actions": [
          "reportCrash",
          "restartByStrategy"
        ]
      },
      {
        "actions": [
          "reportCrash",
          "giveUpUnknown"
        ]
      }
    ]
  },
  "states": {
    "recovering": {
      "on": {
        "READY": {
          "target": "ready"
        },
        "CLOSE": {
          "target": "closed"
        }
      }
    },
    "ready": {
      "on": {
        "CLOSE": {
          "target": "closed"
        }
      }
    },
    "closed": {
      "type": "final"
    }
  }
})
