// Generated from machines/ by `spindle viz`; do not edit. Paste into Stately Studio (Import from code).
// Guards and actions are named here; what they do is in machines/thread.machine.ts.
import { and, not, setup } from 'xstate'

export const machine = setup({
  guards: {
    cancelAwaitsChildren: () => false,
    limitExceeded: () => false,
    limitExceededAfterTools: () => false,
    limitRaisedEnough: () => false,
    limitHookFails: () => false,
    limitHookAborts: () => false,
    limitIsBudget: () => false,
    errorHookRetries: () => false,
    errorHookFails: () => false,
    errorHookAborts: () => false,
    isCurrentReply: () => false,
    replyHasToolCalls: () => false,
    replyOutputInvalid: () => false,
    outputTriesLeft: () => false,
    isCurrentFailure: () => false,
    canRetry: () => false,
    shouldSuspendOnFailure: () => false,
    isPendingPause: () => false,
    decidesPendingCall: () => false,
    awaitsCall: () => false,
    isPendingTool: () => false,
    isLastPendingTool: () => false,
  },
  actions: {
    markStarted: () => {},
    recordReply: () => {},
    recordResult: () => {},
    recordOutput: () => {},
    countInvalidOutput: () => {},
    failWithInvalidOutput: () => {},
    recordToolDone: () => {},
    finishTools: () => {},
    suspendAtCall: () => {},
    recordCallDecision: () => {},
    scheduleRetry: () => {},
    beginRetry: () => {},
    suspendForLimit: () => {},
    raiseLimits: () => {},
    failByLimitHook: () => {},
    abortByLimitHook: () => {},
    failByErrorHook: () => {},
    abortByErrorHook: () => {},
    suspendForFailure: () => {},
    failWithModelError: () => {},
    failWithError: () => {},
    failWhileCancelling: () => {},
    resumeWithLimits: () => {},
    recordCancel: () => {},
    suspendForBudgetLimit: () => {},
    suspendForBudget: () => {},
    markRecovered: () => {},
    suspendForCrashLoop: () => {},
    recordHandOff: () => {},
  },
}).createMachine({
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
          "description": "Effect callModel: once this state's checkpoint is durable, the runtime calls the model with the conversation and sends MODEL_REPLIED or MODEL_FAILED.",
          "on": {
            "MODEL_REPLIED": [
              {
                "guard": and(["isCurrentReply", "replyHasToolCalls"]),
                "target": "runningTools",
                "actions": "recordReply"
              },
              {
                "guard": and(["isCurrentReply", "replyOutputInvalid", "outputTriesLeft"]),
                "target": "checkingLimits",
                "actions": [
                  "recordReply",
                  "countInvalidOutput"
                ]
              },
              {
                "guard": and(["isCurrentReply", "replyOutputInvalid"]),
                "target": "#thread.error",
                "actions": [
                  "recordReply",
                  "failWithInvalidOutput"
                ]
              },
              {
                "guard": "isCurrentReply",
                "target": "#thread.completed",
                "actions": [
                  "recordReply",
                  "recordResult",
                  "recordOutput"
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
                "guard": and(["isCurrentFailure", "canRetry"]),
                "target": "waitingToRetry",
                "actions": "scheduleRetry"
              },
              {
                "guard": and(["isCurrentFailure", "shouldSuspendOnFailure"]),
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
          "description": "Effect runTool: the first tool call of the reply without a result; its intent is recorded before it runs, its result sent as TOOL_DONE. Re-entered for each call. A call that needs an approval, or waits for an answer, sends TOOL_PAUSED instead, and the thread suspends at it.",
          "on": {
            "TOOL_DONE": [
              {
                "guard": and(["isLastPendingTool", "limitExceededAfterTools"]),
                "target": "limitReached",
                "actions": "finishTools"
              },
              {
                "guard": "isLastPendingTool",
                "target": "callingModel",
                "actions": "finishTools"
              },
              {
                "guard": "isPendingTool",
                "target": "runningTools",
                "reenter": true,
                "actions": "recordToolDone"
              }
            ],
            "TOOL_PAUSED": {
              "guard": "isPendingPause",
              "target": "#thread.suspended",
              "actions": "suspendAtCall"
            }
          }
        },
        "limitReached": {
          "description": "Effect decideLimit: the thread's limit hooks decide, else an escalation is proposed; sent as LIMIT_DECIDED.",
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
          "description": "Effect waitUntil: RETRY_DUE at retry.dueAt, a deadline kept in the context so that it survives a restart.",
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
      "description": "Waits for a decision: RESUME (an approval of more, or a person carrying it on), or CALL_DECIDED when it waits at a tool call (pendingCall) for an approval or an answer.",
      "on": {
        "RESUME": {
          "guard": not("awaitsCall"),
          "target": "running",
          "actions": "resumeWithLimits"
        },
        "CALL_DECIDED": {
          "guard": "decidesPendingCall",
          "target": "#thread.running.runningTools",
          "actions": "recordCallDecision"
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
      "description": "Effect settleChildren: the thread's open children are cancelled; CHILDREN_SETTLED once all have stopped.",
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
