// Generated from machines/ by `spindle viz`; do not edit. Paste into Stately Studio (Import from code).
import { createMachine } from 'xstate'

export const machine = createMachine({
  "id": "thread",
  "initial": "created",
  "states": {
    "created": {
      "on": {
        "START": {
          "target": "running",
          "actions": "markStarted"
        },
        "CANCEL": [
          {
            "guard": "cancelAwaitsChildren",
            "target": "#thread.cancelling",
            "actions": "recordCancel"
          },
          {
            "target": "#thread.cancelled",
            "actions": "recordCancel"
          }
        ],
        "FAIL": {
          "target": "error",
          "actions": "failWithError"
        }
      }
    },
    "running": {
      "initial": "checkingLimits",
      "on": {
        "CANCEL": [
          {
            "guard": "cancelAwaitsChildren",
            "target": "#thread.cancelling",
            "actions": "recordCancel"
          },
          {
            "target": "#thread.cancelled",
            "actions": "recordCancel"
          }
        ],
        "FAIL": {
          "target": "error",
          "actions": "failWithError"
        },
        "HAND_OFF": {
          "target": "continued",
          "actions": "recordHandOff"
        },
        "RECOVERED": {
          "actions": "markRecovered"
        },
        "QUARANTINED": {
          "target": "#thread.suspended",
          "actions": "suspendForCrashLoop"
        }
      },
      "states": {
        "checkingLimits": {
          "always": [
            {
              "guard": "limitExceeded",
              "target": "limitReached"
            },
            {
              "target": "callingModel"
            }
          ]
        },
        "callingModel": {
          "invoke": {
            "id": "callModel",
            "src": "callModel"
          },
          "on": {
            "MODEL_REPLIED": [
              {
                "guard": "isCurrentReply && replyHasToolCalls",
                "target": "runningTools",
                "actions": "recordReply"
              },
              {
                "guard": "isCurrentReply",
                "target": "#thread.completed",
                "actions": [
                  "recordReply",
                  "recordResult"
                ]
              }
            ],
            "BUDGET_EXHAUSTED": {
              "target": "#thread.suspended",
              "actions": "suspendForBudget"
            },
            "MODEL_FAILED": [
              {
                "guard": "errorHookRetries",
                "target": "waitingToRetry",
                "actions": "scheduleRetry"
              },
              {
                "guard": "errorHookFails",
                "target": "#thread.error",
                "actions": "failByErrorHook"
              },
              {
                "guard": "errorHookAborts",
                "target": "#thread.cancelled",
                "actions": "abortByErrorHook"
              },
              {
                "guard": "isCurrentFailure && canRetry",
                "target": "waitingToRetry",
                "actions": "scheduleRetry"
              },
              {
                "guard": "isCurrentFailure && shouldSuspendOnFailure",
                "target": "#thread.suspended",
                "actions": "suspendForFailure"
              },
              {
                "guard": "isCurrentFailure",
                "target": "#thread.error",
                "actions": "failWithModelError"
              }
            ]
          }
        },
        "runningTools": {
          "invoke": {
            "id": "runTool",
            "src": "runTool"
          },
          "on": {
            "TOOL_DONE": [
              {
                "guard": "isLastPendingTool",
                "target": "checkingLimits",
                "actions": [
                  "recordToolDone",
                  "clearTurn"
                ]
              },
              {
                "guard": "isPendingTool",
                "target": "runningTools",
                "reenter": true,
                "actions": "recordToolDone"
              }
            ]
          }
        },
        "limitReached": {
          "invoke": {
            "id": "decideLimit",
            "src": "decideLimit"
          },
          "on": {
            "LIMIT_DECIDED": [
              {
                "guard": "limitRaisedEnough",
                "target": "checkingLimits",
                "actions": "raiseLimits"
              },
              {
                "guard": "limitHookFails",
                "target": "#thread.error",
                "actions": "failByLimitHook"
              },
              {
                "guard": "limitHookAborts",
                "target": "#thread.cancelled",
                "actions": "abortByLimitHook"
              },
              {
                "guard": "limitIsBudget",
                "target": "#thread.suspended",
                "actions": "suspendForBudgetLimit"
              },
              {
                "target": "#thread.suspended",
                "actions": "suspendForLimit"
              }
            ]
          }
        },
        "waitingToRetry": {
          "invoke": {
            "id": "waitUntil",
            "src": "waitUntil"
          },
          "on": {
            "RETRY_DUE": {
              "target": "callingModel",
              "actions": "beginRetry"
            }
          }
        }
      }
    },
    "suspended": {
      "on": {
        "RESUME": {
          "target": "running",
          "actions": "resumeWithLimits"
        },
        "CANCEL": [
          {
            "guard": "cancelAwaitsChildren",
            "target": "#thread.cancelling",
            "actions": "recordCancel"
          },
          {
            "target": "#thread.cancelled",
            "actions": "recordCancel"
          }
        ],
        "FAIL": {
          "target": "error",
          "actions": "failWithError"
        }
      }
    },
    "cancelling": {
      "invoke": {
        "id": "settleChildren",
        "src": "settleChildren"
      },
      "on": {
        "CHILDREN_SETTLED": {
          "target": "cancelled"
        },
        "FAIL": {
          "target": "error",
          "actions": "failWhileCancelling"
        }
      }
    },
    "completed": {
      "type": "final"
    },
    "error": {
      "type": "final"
    },
    "cancelled": {
      "type": "final"
    },
    "continued": {
      "type": "final"
    }
  }
})
