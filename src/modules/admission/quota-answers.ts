// What admission tells the caller, the same whichever store decided (in memory, or Redis for several instances):
// the 429 of the limit that said no, the x-ratelimit headers of an admitted request, and a usage snapshot.
import type { PlanConfig } from "../../config/schema";
import { startOfNextMonth } from "./month";
import { AdmissionRejected, type RejectionKind, type UsageSnapshot } from "./store";
import { fiveHoursMs } from "./window";

/** Go-style duration as OpenAI writes `x-ratelimit-reset-tokens`: `1h2m3s`, `45s`, `0s`. */
export function formatReset(milliseconds: number): string {
  let seconds = Math.max(0, Math.ceil(milliseconds / 1000));
  const hours = Math.floor(seconds / 3600);
  seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60);
  seconds -= minutes * 60;
  return `${hours ? `${hours}h` : ""}${hours || minutes ? `${minutes}m` : ""}${seconds}s`;
}

function secondsUntil(milliseconds: number): number {
  return Math.max(1, Math.ceil(milliseconds / 1000));
}

/** The 429 of a limit that said no, with its Retry-After. */
export function quotaRejection(kind: RejectionKind, plan: PlanConfig, wait: { fiveHourWaitMs?: number; monthResetMs?: number }): AdmissionRejected {
  if (kind === "month") {
    return new AdmissionRejected("month", `Your organization has used its monthly quota of ${plan.tokensPerMonth} tokens. It resets on the 1st of next month (00:00 UTC).`, {
      retryAfterSeconds: secondsUntil(wait.monthResetMs ?? 0),
      shouldRetry: false,
    });
  }
  if (kind === "five_hour") {
    return new AdmissionRejected("five_hour", `Your organization has used its 5-hour quota of ${plan.tokensPer5h} tokens. Retry after the time in Retry-After, when enough usage has left the rolling window.`, {
      retryAfterSeconds: secondsUntil(wait.fiveHourWaitMs ?? fiveHoursMs),
      shouldRetry: false,
    });
  }
  return new AdmissionRejected("concurrency", `Your organization already has ${plan.maxConcurrency} requests in flight, the most its plan allows. Retry shortly.`, {
    retryAfterSeconds: 1,
  });
}

/** An organization's state at one moment, as either store reads it. */
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

/** `x-ratelimit-*` for plans with a 5-hour quota (after this request's reservation); empty otherwise. */
export function rateLimitHeaders(plan: PlanConfig, state: QuotaState): Record<string, string> {
  const headers: Record<string, string> = {};
  if (plan.tokensPer5h === undefined) return headers;
  headers["x-ratelimit-limit-tokens"] = String(plan.tokensPer5h);
  headers["x-ratelimit-remaining-tokens"] = String(Math.max(0, plan.tokensPer5h - state.windowUsed - state.reserved));
  // Usage just reserved leaves the window 5 hours from now at the latest.
  headers["x-ratelimit-reset-tokens"] = formatReset(state.untilEmpty || (state.windowUsed + state.reserved > 0 ? fiveHoursMs : 0));
  return headers;
}

/** What the console and `sluice usage` show: both windows against the plan's limits. */
export function usageSnapshot(plan: PlanConfig, state: QuotaState): UsageSnapshot {
  const remaining = (limit: number | undefined, used: number) => (limit === undefined ? undefined : Math.max(0, limit - used - state.reserved));
  return {
    fiveHours: { used: state.windowUsed, limit: plan.tokensPer5h, remaining: remaining(plan.tokensPer5h, state.windowUsed), resetsAt: state.now + state.untilEmpty },
    month: { used: state.monthUsed, limit: plan.tokensPerMonth, remaining: remaining(plan.tokensPerMonth, state.monthUsed), resetsAt: startOfNextMonth(state.now) },
    reserved: state.reserved,
    inFlight: state.inFlight,
  };
}
