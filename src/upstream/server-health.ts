// An upstream server's health, without imports: the server and the console's pages share it.

/**
 * One upstream server of a model as its circuit breaker sees it: `up`; `out` until `outUntil` after
 * `breaker_failures` failures in a row; `probing` once that time is over, while one request tests it (or the next
 * one will).
 */
export interface ServerHealth {
  /** The server's base URL without credentials or query. */
  url: string;
  state: "up" | "out" | "probing";
  /** Failures in a row. */
  failures: number;
  /** Milliseconds since the epoch; null unless out. */
  outUntil: number | null;
  /** Calls of this process on the server that have not ended (each instance counts its own). */
  inFlight: number;
}
