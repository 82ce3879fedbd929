/** A database or Redis call that did not answer in time. */
export class StoreTimeoutError extends Error {
  override name = "StoreTimeoutError";
}

/**
 * Rejects after `milliseconds` if `promise` has not settled: a network store that hangs (a script call caught in a
 * reconnect, a database behind a dead link) must not hold a request forever.
 */
export function withTimeout<T>(promise: Promise<T>, milliseconds: number, what: string): Promise<T> {
  let timer: Timer | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StoreTimeoutError(`${what} did not answer within ${milliseconds} ms`)), milliseconds);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
