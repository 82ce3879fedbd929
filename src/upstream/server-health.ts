// An upstream server's health, without imports: the server and the console's pages share it.

/**
 * One upstream server of a model as its circuit breaker sees it: `up`; `out` until `outUntil` after
 * `breaker_failures` failures in a row, or `breaker_failure_rate` of its last `breaker_window` calls failed while
 * another server was up; `probing` once that time is over, while one request tests it (or the next one will).
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
  /** Of its last calls (at most `breaker_window`, since it last came back from being out for its rate), how many ended and how many of those failed. */
  recentCalls: number;
  recentFailures: number;
  /** Why it is out or being tested; null while up. */
  outFor: "failures_in_a_row" | "failure_rate" | null;
  /** Calls of this process sent here because their conversation prefers this server (routing = "affinity"). */
  affinityCalls: number;
  /** Calls whose conversation prefers this server that went to a less busy one (more than `affinity_slack` beyond). */
  affinityMovedAway: number;
  /**
   * Calls of this process on it that ended: answered; failed against the server (connection, time limit, 5xx, 429,
   * 503, a body that is not an answer); refused as the request's own fault (another 4xx); stopped by their caller.
   */
  calls: { finished: number; failed: number; rejected: number; stopped: number };
}
