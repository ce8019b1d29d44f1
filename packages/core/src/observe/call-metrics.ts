/**
 * The families that count calls, by name and help. A worker declares them for the calls its executor
 * runs; the calls of thread actors, which live in a thread of some process and have no executor
 * there, are counted by their handles and reported with the process (ThreadActorReport), and the
 * dashboard's /metrics adds them to the same families.
 */
export const CALL_FAMILIES = {
  total: {
    name: "torl_calls_total",
    help: 'Calls this worker (or thread actor) ran to their end (actor methods by class and method; tasks with class "(task)").',
  },
  failed: {
    name: "torl_calls_failed_total",
    help: "Calls this worker (or thread actor) ran that threw, or whose result could not be sent.",
  },
  queued: {
    name: "torl_calls_queued",
    help: "Calls this worker (or thread actor) received that wait for a free slot (maxConcurrency).",
  },
  running: {
    name: "torl_calls_running",
    help: "Calls this worker (or thread actor) is running now.",
  },
} as const;
