import type { PlanConfig } from "../../config/schema";
import { monthOf, startOfNextMonth } from "./month";
import { AdmissionRejected, type RejectionKind, type AdmissionRequest, type AdmissionStore, type LedgerBucket, type Lease, type SpentTokens, type UsageSnapshot } from "./store";
import { RollingWindow, fiveHoursMs } from "./window";

class OrganizationState {
  readonly window = new RollingWindow();
  month = 0;
  monthUsed = 0;
  reserved = 0;
  inFlight = 0;

  monthUsedAt(now: number): number {
    const month = monthOf(now);
    if (month !== this.month) {
      this.month = month;
      this.monthUsed = 0;
    }
    return this.monthUsed;
  }
}

/** Before any answer is known, expect this many output tokens (capped at the request's max_tokens). */
const initialExpectedOutput = 1024;
/** Weight of the newest answer in the running average of output tokens per model. */
const averageWeight = 0.2;

/** The output a model usually gives: a running average per model, for reservations. */
export class OutputEstimate {
  private readonly averages = new Map<string, number>();

  /** The usual output of this model, never more than the request's max_tokens. */
  expected(modelId: string, maxTokens: number): number {
    return Math.min(maxTokens, Math.ceil(this.averages.get(modelId) ?? initialExpectedOutput));
  }

  observe(modelId: string, completionTokens: number): void {
    const previous = this.averages.get(modelId);
    this.averages.set(modelId, previous === undefined ? completionTokens : previous + averageWeight * (completionTokens - previous));
  }
}

/** The 429 of a limit that said no, with its Retry-After; the same words whichever store decided. */
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

/**
 * Admission in one process's memory. Every check-and-reserve runs synchronously, without an await, so it is
 * atomic in Bun's single-threaded event loop; the SQLite ledger is the durable record it is rebuilt from.
 */
export class MemoryAdmissionStore implements AdmissionStore {
  private readonly organizations = new Map<string, OrganizationState>();
  private readonly estimate = new OutputEstimate();
  private inFlightTotal = 0;
  private reservedTotal = 0;

  admit(request: AdmissionRequest, now: number): Lease {
    const plan = request.plan;
    const state = this.state(request.organizationId);
    const need = request.promptTokens + 1;
    const windowUsed = plan.tokensPer5h === undefined ? 0 : state.window.used(now);
    if (plan.tokensPerMonth !== undefined && state.monthUsedAt(now) + state.reserved + need > plan.tokensPerMonth) {
      throw quotaRejection("month", plan, { monthResetMs: startOfNextMonth(now) - now });
    }
    if (plan.tokensPer5h !== undefined && windowUsed + state.reserved + need > plan.tokensPer5h) {
      const excess = windowUsed + state.reserved + need - plan.tokensPer5h;
      // Reservations in flight count as usage recorded now: they leave the window 5 hours from now.
      throw quotaRejection("five_hour", plan, { fiveHourWaitMs: state.window.timeUntilFreed(excess, now) ?? fiveHoursMs });
    }
    if (plan.maxConcurrency !== undefined && state.inFlight >= plan.maxConcurrency) throw quotaRejection("concurrency", plan, {});
    const reservation = this.reservationFor(request, state, windowUsed, now);
    state.reserved += reservation;
    state.inFlight++;
    this.reservedTotal += reservation;
    this.inFlightTotal++;
    const headers: Record<string, string> = {};
    if (plan.tokensPer5h !== undefined) {
      headers["x-ratelimit-limit-tokens"] = String(plan.tokensPer5h);
      headers["x-ratelimit-remaining-tokens"] = String(Math.max(0, plan.tokensPer5h - windowUsed - state.reserved));
      headers["x-ratelimit-reset-tokens"] = formatReset(state.window.timeUntilEmpty(now) || (windowUsed + state.reserved > 0 ? fiveHoursMs : 0));
    }
    let settled = false;
    return {
      reservedTokens: reservation,
      headers,
      settle: (spent: SpentTokens | null, at: number) => {
        if (settled) return;
        settled = true;
        state.reserved -= reservation;
        state.inFlight--;
        this.reservedTotal -= reservation;
        this.inFlightTotal--;
        if (spent) this.record(request.modelId, state, spent, at);
      },
    };
  }

  snapshot(organizationId: string, plan: PlanConfig, now: number): UsageSnapshot {
    const state = this.state(organizationId);
    const windowUsed = state.window.used(now);
    const monthUsed = state.monthUsedAt(now);
    const remaining = (limit: number | undefined, used: number) => (limit === undefined ? undefined : Math.max(0, limit - used - state.reserved));
    return {
      fiveHours: { used: windowUsed, limit: plan.tokensPer5h, remaining: remaining(plan.tokensPer5h, windowUsed), resetsAt: now + state.window.timeUntilEmpty(now) },
      month: { used: monthUsed, limit: plan.tokensPerMonth, remaining: remaining(plan.tokensPerMonth, monthUsed), resetsAt: startOfNextMonth(now) },
      reserved: state.reserved,
      inFlight: state.inFlight,
    };
  }

  reset(organizationId: string): void {
    const state = this.state(organizationId);
    state.window.clear();
    state.monthUsed = 0;
  }

  restore(organizationId: string, buckets: LedgerBucket[], monthTokens: number, monthStart: number): void {
    const state = this.state(organizationId);
    state.window.clear();
    for (const bucket of buckets) state.window.add(bucket.tokens, bucket.lastTime);
    state.month = monthOf(monthStart);
    state.monthUsed = monthTokens;
  }

  inFlight(): number {
    return this.inFlightTotal;
  }

  reservedTokens(): number {
    return this.reservedTotal;
  }

  /**
   * The prompt plus the output this model usually gives (never more than max_tokens), and never more than the
   * headroom left, so a worst-case reservation never blocks an organization that has room.
   */
  private reservationFor(request: AdmissionRequest, state: OrganizationState, windowUsed: number, now: number): number {
    const plan = request.plan;
    if (plan.tokensPer5h === undefined && plan.tokensPerMonth === undefined) return 0;
    const expected = this.estimate.expected(request.modelId, request.maxTokens);
    let reservation = request.promptTokens + expected;
    if (plan.tokensPer5h !== undefined) reservation = Math.min(reservation, plan.tokensPer5h - windowUsed - state.reserved);
    if (plan.tokensPerMonth !== undefined) reservation = Math.min(reservation, plan.tokensPerMonth - state.monthUsedAt(now) - state.reserved);
    return reservation;
  }

  private record(modelId: string, state: OrganizationState, spent: SpentTokens, at: number): void {
    const tokens = spent.promptTokens + spent.completionTokens;
    state.window.add(tokens, at);
    state.monthUsedAt(at);
    state.monthUsed += tokens;
    this.estimate.observe(modelId, spent.completionTokens);
  }

  private state(organizationId: string): OrganizationState {
    let state = this.organizations.get(organizationId);
    if (!state) {
      state = new OrganizationState();
      this.organizations.set(organizationId, state);
    }
    return state;
  }
}
