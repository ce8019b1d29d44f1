/** The task `pnpm torl bench pool` runs in ThreadPool threads: plain CPU work of a chosen size. */

/** Counts primes below `n` by trial division. */
export function countPrimes(n: number): number {
  let count = 0;
  for (let i = 2; i < n; i++) {
    let prime = true;
    for (let d = 2; d * d <= i; d++) {
      if (i % d === 0) {
        prime = false;
        break;
      }
    }
    if (prime) count++;
  }
  return count;
}
