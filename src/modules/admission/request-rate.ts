// A subject's requests per minute, as a token bucket: it holds up to `perMinute` requests, refills continuously at
// `perMinute` a minute, and each admitted request takes one. So a whole minute's worth may come at once, and after that
// one every 60/perMinute seconds, as OpenAI's limits replenish. The state is two numbers (what the bucket held and
// when), so it costs the same in memory and in Redis (admit.lua does the same arithmetic), and a burst takes whole
// requests from a whole number: exact, whatever the rate.

export const minuteMs = 60_000;

/** Refills are fractions of a request: one that falls short of a whole request by a rounding error still counts as one. */
const slack = 1e-6;

/** A bucket's state: what it held after the last request it admitted, and when. Never used: full. */
export interface RequestBucket {
  held: number;
  /** Milliseconds since the epoch; negative: never used. */
  at: number;
}

/** The requests the bucket holds at `now` (whole or not), never more than a minute's worth. */
export function requestsHeld(bucket: RequestBucket, perMinute: number, now: number): number {
  if (bucket.at < 0) return perMinute;
  const elapsed = Math.max(0, now - bucket.at);
  return Math.min(perMinute, bucket.held + (elapsed * perMinute) / minuteMs);
}

/** Milliseconds until the bucket holds one whole request; 0 when it does now. */
export function requestWaitMs(held: number, perMinute: number): number {
  return held + slack >= 1 ? 0 : ((1 - held) * minuteMs) / perMinute;
}

/** The whole requests left after this one, as `x-ratelimit-remaining-requests` says. */
export function requestsRemaining(held: number): number {
  return Math.max(0, Math.floor(held + slack));
}

/** Milliseconds until the bucket is full again, as `x-ratelimit-reset-requests` says. */
export function requestsResetMs(held: number, perMinute: number): number {
  return Math.max(0, ((perMinute - held) * minuteMs) / perMinute);
}

/**
 * The bucket after `starts` (start times, oldest first) replayed into it from full at `since`: what a restart reads
 * back from the ledger. Started full a minute before now, it holds at most what it held then, so the replay is never
 * stricter than the bucket was.
 */
export function replayStarts(perMinute: number, since: number, starts: readonly number[]): RequestBucket {
  const bucket: RequestBucket = { held: perMinute, at: since };
  for (const at of starts) {
    bucket.held = Math.max(0, requestsHeld(bucket, perMinute, at) - 1);
    bucket.at = Math.max(bucket.at, at);
  }
  return bucket;
}
