// Generated from machines/ by `spindle viz`; do not edit. Paste into Stately Studio (Import from code).
import { createMachine } from 'xstate'

export const machine = createMachine({
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
