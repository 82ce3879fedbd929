import type { PlanConfig } from "../../config/schema";
import type { RequestStart } from "../../storage/types";
import { fiveHoursMs, monthOf, startOfNextMonth } from "../../usage-periods";
import { OutputEstimate } from "./estimate";
import { quotaTokens } from "./quota-weight";
import { replayStarts, requestsHeld, requestWaitMs, type RequestBucket } from "./request-rate";
import { quotaRejection, rateLimitFigures, usageSnapshot, type QuotaState, type RateLimitFigures } from "./quota-answers";
import {
  hasQuota,
  type AdmissionRequest,
  type AdmissionStore,
  type KeyAdmission,
  type LedgerBucket,
  type Lease,
  type Limits,
  type SpentTokens,
  type Subject,
  type UsageSnapshot,
} from "./store";
import { RollingWindow } from "./window";

/** The usage of one subject of admission: an organization, or a key with caps of its own. */
class SubjectState {
  readonly window = new RollingWindow();
  month = 0;
  monthUsed = 0;
  reserved = 0;
  inFlight = 0;
  /** The requests-per-minute bucket: full until first used. */
  readonly requests: RequestBucket = { held: 0, at: -1 };
  /** Start times read back from the ledger (restoreRequests), taken from the bucket once its rate is known. */
  private recordedStarts: number[] | undefined;
  private recordedSince = 0;

  /** Keeps recorded start times, from `since`, for the bucket to take once a rate applies. */
  recordStarts(starts: number[], since: number): void {
    this.recordedStarts = starts;
    this.recordedSince = since;
  }

  /** The requests-per-minute bucket, with the recorded starts taken from it first, at `perMinute`. */
  bucket(perMinute: number): RequestBucket {
    const starts = this.recordedStarts;
    if (starts === undefined) return this.requests;
    this.recordedStarts = undefined;
    const replayed = replayStarts(perMinute, this.recordedSince, starts);
    this.requests.held = replayed.held;
    this.requests.at = replayed.at;
    return this.requests;
  }

  monthUsedAt(now: number): number {
    const month = monthOf(now);
    if (month !== this.month) {
      this.month = month;
      this.monthUsed = 0;
    }
    return this.monthUsed;
  }

  /** Throws the 429 of the first limit this request would break; returns the window's usage otherwise. */
  check(limits: Limits, need: number, now: number, subject: Subject): number {
    const windowUsed = limits.tokensPer5h === undefined ? 0 : this.window.used(now);
    if (limits.tokensPerMonth !== undefined && this.monthUsedAt(now) + this.reserved + need > limits.tokensPerMonth) {
      throw quotaRejection("month", limits, startOfNextMonth(now) - now, subject);
    }
    if (limits.tokensPer5h !== undefined && windowUsed + this.reserved + need > limits.tokensPer5h) {
      const excess = windowUsed + this.reserved + need - limits.tokensPer5h;
      // Reservations in flight count as usage recorded now: they leave the window 5 hours from now.
      throw quotaRejection("five_hour", limits, this.window.timeUntilFreed(excess, now) ?? fiveHoursMs, subject);
    }
    if (limits.requestsPerMinute !== undefined) {
      const wait = requestWaitMs(requestsHeld(this.bucket(limits.requestsPerMinute), limits.requestsPerMinute, now), limits.requestsPerMinute);
      if (wait > 0) throw quotaRejection("requests", limits, wait, subject);
    }
    if (limits.maxConcurrency !== undefined && this.inFlight >= limits.maxConcurrency) throw quotaRejection("concurrency", limits, undefined, subject);
    return windowUsed;
  }

  /** The tokens left under this subject's quotas; Infinity when it has none. */
  headroom(limits: Limits, windowUsed: number, now: number): number {
    let room = Number.POSITIVE_INFINITY;
    if (limits.tokensPer5h !== undefined) room = Math.min(room, limits.tokensPer5h - windowUsed - this.reserved);
    if (limits.tokensPerMonth !== undefined) room = Math.min(room, limits.tokensPerMonth - this.monthUsedAt(now) - this.reserved);
    return room;
  }

  /** Takes a place in flight, reserves tokens and takes one request from the requests-per-minute bucket. */
  take(reservation: number, limits: Limits, now: number): void {
    this.reserved += reservation;
    this.inFlight++;
    if (limits.requestsPerMinute === undefined) return;
    this.requests.held = requestsHeld(this.requests, limits.requestsPerMinute, now) - 1;
    // A clock stepped back does not refill the bucket twice.
    this.requests.at = Math.max(this.requests.at, now);
  }

  /** Gives the place and the reservation back, and records what was really spent. */
  give(reservation: number, counted: number, at: number): void {
    this.reserved -= reservation;
    this.inFlight--;
    if (counted === 0) return;
    this.window.add(counted, at);
    this.monthUsedAt(at);
    this.monthUsed += counted;
  }

  quotaState(now: number, windowUsed: number): QuotaState {
    return {
      now,
      windowUsed,
      monthUsed: this.monthUsedAt(now),
      reserved: this.reserved,
      inFlight: this.inFlight,
      untilEmpty: this.window.timeUntilEmpty(now),
      requests: this.requests,
    };
  }
}

/**
 * One admitted request's lease: an object of its own rather than a settle closure over admit's scope, which would keep
 * that scope and the admission request for as long as a stream lasts (bench/HISTORY.md, "Fewer cells an open stream").
 */
class MemoryLease implements Lease {
  private done = false;

  constructor(
    private readonly store: MemoryAdmissionStore,
    readonly organization: SubjectState,
    readonly key: SubjectState | undefined,
    readonly reservedTokens: number,
    readonly modelId: string,
    private readonly figures: RateLimitFigures | undefined,
  ) {}

  get headers(): Record<string, string> {
    return this.figures ? this.figures.headers() : {};
  }

  settle(spent: SpentTokens | null, at: number, weight = 1): void {
    if (this.done) return;
    this.done = true;
    this.store.settled(this, spent, at, weight);
  }
}

/**
 * Admission in one process's memory. Every check-and-reserve runs synchronously, without an await, so it is
 * atomic in Bun's single-threaded event loop; the SQLite ledger is the durable record it is rebuilt from. A key with
 * caps of its own is a second subject, checked and reserved in the same step as its organization.
 */
export class MemoryAdmissionStore implements AdmissionStore {
  private readonly subjects = new Map<string, SubjectState>();
  private readonly estimate = new OutputEstimate();
  private inFlightTotal = 0;
  private reservedTotal = 0;

  admit(request: AdmissionRequest, now: number): Lease {
    const plan = request.plan;
    const keyLimits = request.key?.limits;
    const organization = this.state(request.organizationId);
    const key = request.key ? this.state(keySubject(request.organizationId, request.key.id)) : undefined;
    const need = quotaTokens(request.promptTokens, request.weight ?? 1) + 1;
    const organizationWindow = organization.check(plan, need, now, "organization");
    const keyWindow = key && keyLimits ? key.check(keyLimits, need, now, "key") : 0;
    const reservation = this.reservationFor(
      request,
      organization.headroom(plan, organizationWindow, now),
      key && keyLimits ? key.headroom(keyLimits, keyWindow, now) : Number.POSITIVE_INFINITY,
    );
    organization.take(reservation, plan, now);
    if (key && keyLimits) key.take(reservation, keyLimits, now);
    this.reservedTotal += reservation;
    this.inFlightTotal++;
    const figures = rateLimitFigures(
      { limits: plan, state: organization.quotaState(now, organizationWindow) },
      key && keyLimits ? { limits: keyLimits, state: key.quotaState(now, keyWindow) } : undefined,
    );
    return new MemoryLease(this, organization, key, reservation, request.modelId, figures);
  }

  /** A lease's settle (MemoryLease calls it once): the places and reservations are given back, the spend recorded. */
  settled(lease: MemoryLease, spent: SpentTokens | null, at: number, weight: number): void {
    const counted = spent ? quotaTokens(spent.promptTokens + spent.completionTokens, weight) : 0;
    lease.organization.give(lease.reservedTokens, counted, at);
    lease.key?.give(lease.reservedTokens, counted, at);
    this.reservedTotal -= lease.reservedTokens;
    this.inFlightTotal--;
    if (spent) this.estimate.observe(lease.modelId, spent.completionTokens);
  }

  snapshot(organizationId: string, plan: PlanConfig, now: number): UsageSnapshot {
    return usageSnapshot(plan, this.peek(organizationId, plan, now));
  }

  keySnapshot(organizationId: string, key: KeyAdmission, now: number): UsageSnapshot {
    return usageSnapshot(key.limits, this.peek(keySubject(organizationId, key.id), key.limits, now));
  }

  /** A subject's state as a snapshot reads it; one never admitted is read as empty and not kept (scrapes read them all). */
  private peek(id: string, limits: Limits, now: number): QuotaState {
    const state = this.subjects.get(id) ?? new SubjectState();
    if (limits.requestsPerMinute !== undefined) state.bucket(limits.requestsPerMinute);
    return state.quotaState(now, state.window.used(now));
  }

  /**
   * Takes the requests recorded since `since` (a minute before now) from the requests-per-minute buckets: a restart
   * then does not hand every organization a fresh minute's worth. Each organization's bucket, and those of the keys in
   * `pacedKeys` (the keys with a rate of their own), take their recorded requests once their rate is known. A request
   * admitted but not recorded (its caller left while it waited) is not taken: at most that much more may pass.
   */
  restoreRequests(starts: RequestStart[], since: number, pacedKeys: ReadonlySet<string>): void {
    const bySubject = new Map<string, number[]>();
    const add = (id: string, at: number) => {
      const list = bySubject.get(id);
      if (list) list.push(at);
      else bySubject.set(id, [at]);
    };
    for (const start of starts) {
      add(start.organizationId, start.startedAt);
      if (pacedKeys.has(start.keyId)) add(keySubject(start.organizationId, start.keyId), start.startedAt);
    }
    for (const [id, times] of bySubject) this.state(id).recordStarts(times, since);
  }

  restore(organizationId: string, buckets: LedgerBucket[], monthTokens: number, monthStart: number, keyId?: string): void {
    const state = this.state(keyId === undefined ? organizationId : keySubject(organizationId, keyId));
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
   * headroom left, so a worst-case reservation never blocks a subject that has room.
   */
  private reservationFor(request: AdmissionRequest, organizationRoom: number, keyRoom: number): number {
    if (!hasQuota(request.plan) && !(request.key && hasQuota(request.key.limits))) return 0;
    const expected = this.estimate.expected(request.modelId, request.maxTokens);
    return Math.min(quotaTokens(request.promptTokens + expected, request.weight ?? 1), organizationRoom, keyRoom);
  }

  private state(id: string): SubjectState {
    let state = this.subjects.get(id);
    if (!state) {
      state = new SubjectState();
      this.subjects.set(id, state);
    }
    return state;
  }
}

/** Keys share the map with organizations under a name no organization id can take. */
function keySubject(organizationId: string, keyId: string): string {
  return `${organizationId}/${keyId}`;
}
