import type { PlanConfig } from "../../config/schema";
import { monthOf, startOfNextMonth } from "./month";
import { OutputEstimate } from "./estimate";
import { quotaRejection, rateLimitHeaders, usageSnapshot } from "./quota-answers";
import type { AdmissionRequest, AdmissionStore, LedgerBucket, Lease, SpentTokens, UsageSnapshot } from "./store";
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
    const headers = plan.tokensPer5h === undefined ? {} : rateLimitHeaders(plan, this.quotaState(state, now, windowUsed));
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
    return usageSnapshot(plan, this.quotaState(state, now, state.window.used(now)));
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

  private quotaState(state: OrganizationState, now: number, windowUsed: number) {
    return { now, windowUsed, monthUsed: state.monthUsedAt(now), reserved: state.reserved, inFlight: state.inFlight, untilEmpty: state.window.timeUntilEmpty(now) };
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
