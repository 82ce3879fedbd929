// What admission tells the caller, the same whichever store decided (in memory, or Redis for several instances):
// the 429 of the limit that said no, the x-ratelimit headers of an admitted request, and a usage snapshot.
import { fiveHoursMs, startOfNextMonth } from "../../usage-periods";
import { AdmissionRejected, type Limits, type RejectionKind, type Subject, type UsageSnapshot } from "./store";

// The last reset written: the requests of one second mostly share it.
let lastResetSeconds = -1;
let lastResetText = "";

/** Go-style duration as OpenAI writes `x-ratelimit-reset-tokens`: `1h2m3s`, `45s`, `0s`. */
export function formatReset(milliseconds: number): string {
  const total = Math.max(0, Math.ceil(milliseconds / 1000));
  if (total !== lastResetSeconds) {
    lastResetSeconds = total;
    lastResetText = goDuration(total);
  }
  return lastResetText;
}

function goDuration(total: number): string {
  let seconds = total;
  const hours = Math.floor(seconds / 3600);
  seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60);
  seconds -= minutes * 60;
  return `${hours ? `${hours}h` : ""}${hours || minutes ? `${minutes}m` : ""}${seconds}s`;
}

function secondsUntil(milliseconds: number): number {
  return Math.max(1, Math.ceil(milliseconds / 1000));
}

/** The 429 of a limit that said no, with its Retry-After: the organization's plan, or the key's own cap. */
export function quotaRejection(
  kind: RejectionKind,
  limits: Limits,
  wait: { fiveHourWaitMs?: number; monthResetMs?: number },
  subject: Subject = "organization",
): AdmissionRejected {
  const who = subject === "organization" ? "Your organization" : "This API key";
  const whose = subject === "organization" ? "its plan" : "the cap set on this key";
  if (kind === "month") {
    return new AdmissionRejected(
      "month",
      `${who} has used its monthly quota of ${limits.tokensPerMonth} tokens. It resets on the 1st of next month (00:00 UTC).`,
      {
        retryAfterSeconds: secondsUntil(wait.monthResetMs ?? 0),
        shouldRetry: false,
      },
    );
  }
  if (kind === "five_hour") {
    return new AdmissionRejected(
      "five_hour",
      `${who} has used its 5-hour quota of ${limits.tokensPer5h} tokens. Retry after the time in Retry-After, when enough usage has left the rolling window.`,
      {
        retryAfterSeconds: secondsUntil(wait.fiveHourWaitMs ?? fiveHoursMs),
        shouldRetry: false,
      },
    );
  }
  return new AdmissionRejected("concurrency", `${who} already has ${limits.maxConcurrency} requests in flight, the most ${whose} allows. Retry shortly.`, {
    retryAfterSeconds: 1,
  });
}

/** A subject's state at one moment, as either store reads it. */
export interface QuotaState {
  now: number;
  windowUsed: number;
  monthUsed: number;
  /** Reservations of requests in flight, this one's included once admitted. */
  reserved: number;
  inFlight: number;
  /** Milliseconds until everything now in the 5-hour window has left it. */
  untilEmpty: number;
}

function fiveHourRemaining(limits: Limits, state: QuotaState): number {
  return Math.max(0, (limits.tokensPer5h ?? 0) - state.windowUsed - state.reserved);
}

/**
 * An admitted request's `x-ratelimit-*` figures, kept as numbers until its headers are written: a lease lives as long
 * as its stream, and four header strings (the reset time a rope of four) would be cells every full collection marks.
 */
export class RateLimitFigures {
  constructor(
    readonly limit: number,
    readonly remaining: number,
    /** Milliseconds until the window has room again. */
    readonly resetMs: number,
  ) {}

  headers(): Record<string, string> {
    return {
      "x-ratelimit-limit-tokens": String(this.limit),
      "x-ratelimit-remaining-tokens": String(this.remaining),
      "x-ratelimit-reset-tokens": formatReset(this.resetMs),
    };
  }
}

/**
 * The figures after this request's reservation, for the 5-hour quota that has less left: the organization's or the
 * key's own; undefined when neither has one.
 */
export function rateLimitFigures(
  organization: { limits: Limits; state: QuotaState },
  key?: { limits: Limits; state: QuotaState },
): RateLimitFigures | undefined {
  let tightest = organization.limits.tokensPer5h === undefined ? undefined : organization;
  if (
    key &&
    key.limits.tokensPer5h !== undefined &&
    (!tightest || fiveHourRemaining(key.limits, key.state) < fiveHourRemaining(tightest.limits, tightest.state))
  )
    tightest = key;
  if (!tightest) return undefined;
  const { limits, state } = tightest;
  // Usage just reserved leaves the window 5 hours from now at the latest.
  const resetMs = state.untilEmpty || (state.windowUsed + state.reserved > 0 ? fiveHoursMs : 0);
  return new RateLimitFigures(limits.tokensPer5h as number, fiveHourRemaining(limits, state), resetMs);
}

/** `x-ratelimit-*` after this request's reservation (see rateLimitFigures); empty when no 5-hour quota applies. */
export function rateLimitHeaders(organization: { limits: Limits; state: QuotaState }, key?: { limits: Limits; state: QuotaState }): Record<string, string> {
  return rateLimitFigures(organization, key)?.headers() ?? {};
}

/** What the console and `sluice usage` show: both windows against a subject's limits. */
export function usageSnapshot(limits: Limits, state: QuotaState): UsageSnapshot {
  const remaining = (limit: number | undefined, used: number) => (limit === undefined ? undefined : Math.max(0, limit - used - state.reserved));
  return {
    fiveHours: {
      used: state.windowUsed,
      limit: limits.tokensPer5h,
      remaining: remaining(limits.tokensPer5h, state.windowUsed),
      resetsAt: state.now + state.untilEmpty,
    },
    month: {
      used: state.monthUsed,
      limit: limits.tokensPerMonth,
      remaining: remaining(limits.tokensPerMonth, state.monthUsed),
      resetsAt: startOfNextMonth(state.now),
    },
    reserved: state.reserved,
    inFlight: state.inFlight,
  };
}
