/**
 * What this process says it is doing, by topic (e.g. "trainer": its step, its current phase and
 * the phases done), sent with its report to the dashboard. Values are plain JSON.
 */

export type Activity = Record<string, unknown>;

const activities = new Map<string, Activity>();

/** Sets (or, with undefined, clears) this process's activity under `topic`. */
export function setProcessActivity(topic: string, value: Activity | undefined): void {
  if (value === undefined) activities.delete(topic);
  else activities.set(topic, value);
}

/** Every topic's activity now. */
export function processActivities(): Record<string, Activity> {
  return Object.fromEntries(activities);
}
