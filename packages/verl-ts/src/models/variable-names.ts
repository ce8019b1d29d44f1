/** Names for tfjs variables: they share one registry per process, so every name gets a unique suffix. */

let counter = 0;

/** A process-unique number for tfjs variable names. */
export function uid(): number {
  return ++counter;
}
