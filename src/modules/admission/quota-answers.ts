// What admission tells the caller, the same whichever store decided (in memory, or Redis for several instances):
// the 429 of the limit that said no, the x-ratelimit headers of an admitted request, and a usage snapshot.
import { fiveHoursMs, startOfNextMonth } from "../../usage-periods";
import { requestsHeld, requestsRemaining, requestsResetMs, type RequestBucket } from "./request-rate";
import { AdmissionRejected, type Limits, type RejectionKind, type RequestsUsage, type Subject, type UsageSnapshot } from "./store";

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

/**
 * The 429 of a limit that said no, with its Retry-After: the organization's plan, or the key's own cap. `waitMs`: how
 * long until the request would fit (until the month resets, usage leaves the 5-hour window, or the requests-per-minute
 * bucket holds one more); none for the concurrency cap, which frees up when any request ends.
 */
export function quotaRejection(kind: RejectionKind, limits: Limits, waitMs?: number, subject: Subject = "organization"): AdmissionRejected {
  const who = subject === "organization" ? "Your organization" : "This API key";
  const whose = subject === "organization" ? "its plan" : "the cap set on this key";
  if (kind === "month") {
    return new AdmissionRejected(
      "month",
      `${who} has used its monthly quota of ${limits.tokensPerMonth} tokens. It resets on the 1st of next month (00:00 UTC).`,
      {
        retryAfterSeconds: secondsUntil(waitMs ?? 0),
        shouldRetry: false,
      },
    );
  }
  if (kind === "five_hour") {
    return new AdmissionRejected(
      "five_hour",
      `${who} has used its 5-hour quota of ${limits.tokensPer5h} tokens. Retry after the time in Retry-After, when enough usage has left the rolling window.`,
      {
        retryAfterSeconds: secondsUntil(waitMs ?? fiveHoursMs),
        shouldRetry: false,
      },
    );
  }
  if (kind === "requests") {
    // Left to the SDKs to retry (no x-should-retry: false): the wait is seconds, as for the concurrency cap.
    return new AdmissionRejected(
      "requests",
      `${who} has reached the limit of ${limits.requestsPerMinute} ${limits.requestsPerMinute === 1 ? "request" : "requests"} per minute that ${whose} allows. Retry after the time in Retry-After.`,
      { retryAfterSeconds: secondsUntil(waitMs ?? 0), retryAfterMs: waitMs ?? 0 },
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
  /** The requests-per-minute bucket (see request-rate.ts), this request taken once admitted. */
  requests: RequestBucket;
}

function fiveHourRemaining(limits: Limits, state: QuotaState): number {
  return Math.max(0, (limits.tokensPer5h ?? 0) - state.windowUsed - state.reserved);
}

/**
 * An admitted request's `x-ratelimit-*` figures, kept as numbers until its headers are written: a lease lives as long
 * as its stream, and six header strings (the reset times ropes of four) would be cells every full collection marks.
 * A limit of -1: that kind of limit does not apply.
 */
export class RateLimitFigures {
  constructor(
    readonly tokenLimit: number,
    readonly tokensRemaining: number,
    /** Milliseconds until the 5-hour window has room again. */
    readonly tokensResetMs: number,
    readonly requestLimit: number,
    /** What the requests-per-minute bucket held once this request was taken. */
    readonly requestsHeld: number,
  ) {}

  headers(): Record<string, string> {
    // Most plans have a token quota alone: one object literal, as before there were requests per minute.
    if (this.requestLimit < 0) {
      return {
        "x-ratelimit-limit-tokens": String(this.tokenLimit),
        "x-ratelimit-remaining-tokens": String(this.tokensRemaining),
        "x-ratelimit-reset-tokens": formatReset(this.tokensResetMs),
      };
    }
    const headers: Record<string, string> = {
      "x-ratelimit-limit-requests": String(this.requestLimit),
      "x-ratelimit-remaining-requests": String(requestsRemaining(this.requestsHeld)),
      "x-ratelimit-reset-requests": formatReset(requestsResetMs(this.requestsHeld, this.requestLimit)),
    };
    if (this.tokenLimit >= 0) {
      headers["x-ratelimit-limit-tokens"] = String(this.tokenLimit);
      headers["x-ratelimit-remaining-tokens"] = String(this.tokensRemaining);
      headers["x-ratelimit-reset-tokens"] = formatReset(this.tokensResetMs);
    }
    return headers;
  }
}

/** One subject's limits and state, as admission read them for a request. */
interface SubjectFigures {
  limits: Limits;
  state: QuotaState;
}

/**
 * The figures after this request's admission, each for the subject with less left: the organization or the key's own
 * caps, for the 5-hour quota and for the requests a minute apart; undefined when neither kind applies.
 */
export function rateLimitFigures(organization: SubjectFigures, key?: SubjectFigures): RateLimitFigures | undefined {
  let tokens = organization.limits.tokensPer5h === undefined ? undefined : organization;
  if (key && key.limits.tokensPer5h !== undefined && (!tokens || fiveHourRemaining(key.limits, key.state) < fiveHourRemaining(tokens.limits, tokens.state)))
    tokens = key;
  const organizationRequests = requestsLeft(organization);
  const keyRequests = key ? requestsLeft(key) : Number.POSITIVE_INFINITY;
  const requests = keyRequests < organizationRequests ? key : organizationRequests < Number.POSITIVE_INFINITY ? organization : undefined;
  if (!tokens && !requests) return undefined;
  let tokenLimit = -1;
  let tokensRemaining = 0;
  let tokensResetMs = 0;
  if (tokens) {
    const { limits, state } = tokens;
    tokenLimit = limits.tokensPer5h as number;
    tokensRemaining = fiveHourRemaining(limits, state);
    // Usage just reserved leaves the window 5 hours from now at the latest.
    tokensResetMs = state.untilEmpty || (state.windowUsed + state.reserved > 0 ? fiveHoursMs : 0);
  }
  const requestLimit = requests?.limits.requestsPerMinute ?? -1;
  return new RateLimitFigures(tokenLimit, tokensRemaining, tokensResetMs, requestLimit, Math.min(organizationRequests, keyRequests));
}

/** What a subject's requests-per-minute bucket holds; Infinity when it has no such limit. */
function requestsLeft(subject: SubjectFigures): number {
  const limit = subject.limits.requestsPerMinute;
  return limit === undefined ? Number.POSITIVE_INFINITY : requestsHeld(subject.state.requests, limit, subject.state.now);
}

/** `x-ratelimit-*` after this request's admission (see rateLimitFigures); empty when no limit of either kind applies. */
export function rateLimitHeaders(organization: SubjectFigures, key?: SubjectFigures): Record<string, string> {
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
    ...(limits.requestsPerMinute === undefined ? {} : { requests: requestsSnapshot(limits.requestsPerMinute, state) }),
  };
}

function requestsSnapshot(limit: number, state: QuotaState): RequestsUsage {
  const held = requestsHeld(state.requests, limit, state.now);
  return { limit, remaining: requestsRemaining(held), fullAt: state.now + Math.ceil(requestsResetMs(held, limit)) };
}
