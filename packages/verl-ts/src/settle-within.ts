/**
 * `work`, or a rejection with `timeoutError()` after `ms` milliseconds: the one bound on calls into user
 * code (tools, reward scorers) that may never settle. The timer is cleared when the work settles, or
 * when `cancel` aborts (the caller has failed already: the timer must not keep the process alive); the
 * work itself cannot be cancelled and is left to finish on its own.
 */
export function settleWithin<T>(
  work: PromiseLike<T>,
  ms: number,
  timeoutError: () => Error,
  cancel?: AbortSignal,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timeoutError()), ms);
  });
  const stop = () => clearTimeout(timer);
  cancel?.addEventListener("abort", stop, { once: true });
  return Promise.race([Promise.resolve(work), timeout]).finally(() => {
    stop();
    cancel?.removeEventListener("abort", stop);
  });
}
