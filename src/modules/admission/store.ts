import type { PlanConfig } from "../../config/schema";
import { SluiceError, type SluiceErrorOptions } from "../../errors";
import type { LedgerBucket } from "../../storage/types";

export type RejectionKind = "five_hour" | "month" | "requests" | "concurrency";

/** A 429 from admission, with which limit said no (for metrics). */
export class AdmissionRejected extends SluiceError {
  constructor(
    readonly kind: RejectionKind,
    message: string,
    options: SluiceErrorOptions,
  ) {
    super(kind === "month" ? "insufficient_quota" : "rate_limit_exceeded", message, options);
  }
}

/** The caps of one subject of admission: an organization (its plan's) or a key (its own). Undefined: none. */
export type Limits = Pick<PlanConfig, "tokensPer5h" | "tokensPerMonth" | "maxConcurrency" | "requestsPerMinute">;

/** Whether a subject has a token quota (and so needs a reservation). */
export function hasQuota(limits: Limits): boolean {
  return limits.tokensPer5h !== undefined || limits.tokensPerMonth !== undefined;
}

/** Whose limit said no: the organization's plan, or the key's own caps. */
export type Subject = "organization" | "key";

/** A key's own caps, when it has any. */
export interface KeyAdmission {
  id: string;
  limits: Limits;
}

/** What admission needs to know about a request. */
export interface AdmissionRequest {
  organizationId: string;
  plan: PlanConfig;
  /** Set when the key has caps of its own: the request must fit those and the plan's, in the same atomic step. */
  key?: KeyAdmission;
  modelId: string;
  /** The prompt as Sluice counts it; only needed when the plan has a token quota. */
  promptTokens: number;
  /** The effective output limit sent upstream. */
  maxTokens: number;
  /** The model's quota weight (1 unless given): the reservation counts the prompt and output at it (see quotaTokens). */
  weight?: number;
}

/** Tokens a request really used: prompt + completion (reasoning included). */
export interface SpentTokens {
  promptTokens: number;
  completionTokens: number;
}

/**
 * A request's admission: its concurrency slot and its token reservation. Settled exactly once (later calls do
 * nothing): the slot is freed and the reservation replaced by what was really spent.
 */
export interface Lease {
  readonly reservedTokens: number;
  /**
   * `x-ratelimit-*` headers for plans with a 5-hour quota; empty otherwise. Read once, by the request's answer, which
   * adds its own headers to the object rather than copying it.
   */
  readonly headers: Record<string, string>;
  /**
   * `weight`: the quota weight of the model that answered (a fallback's may differ from the one admitted); the quotas
   * count the spent tokens at it.
   */
  settle(spent: SpentTokens | null, at: number, weight?: number): void;
}

export interface WindowUsage {
  used: number;
  limit: number | undefined;
  /** limit − used − reserved, never below 0; undefined when unlimited. */
  remaining: number | undefined;
  /** When the usage now counted has all left the window (5 h) or the month resets. */
  resetsAt: number;
}

/** Where a subject stands against its requests per minute. */
export interface RequestsUsage {
  limit: number;
  /** Whole requests it may start now. */
  remaining: number;
  /** When it may start a whole minute's worth again. */
  fullAt: number;
}

export interface UsageSnapshot {
  fiveHours: WindowUsage;
  month: WindowUsage;
  reserved: number;
  inFlight: number;
  /** Present when a requests-per-minute limit applies. */
  requests?: RequestsUsage;
}

/**
 * The one owner of quota and concurrency state: checking both quotas, reserving and taking the slot is one atomic
 * step. In one process (MemoryAdmissionStore) every call is synchronous, so nothing can interleave; the shared store
 * (RedisAdmissionStore) does the same step in one Lua script for every instance, and answers asynchronously.
 */
export interface AdmissionStore {
  /** Throws SluiceError 429 (rate_limit_exceeded or insufficient_quota), or 503 if it cannot decide; returns the lease. */
  admit(request: AdmissionRequest, now: number): Lease | Promise<Lease>;
  snapshot(organizationId: string, plan: PlanConfig, now: number): UsageSnapshot | Promise<UsageSnapshot>;
  /** A key's use against its own caps. */
  keySnapshot(organizationId: string, key: KeyAdmission, now: number): UsageSnapshot | Promise<UsageSnapshot>;
  /** Replaces an organization's (or, with `keyId`, one of its keys') recorded usage with what the ledger holds. */
  restore(organizationId: string, buckets: LedgerBucket[], monthTokens: number, monthStart: number, keyId?: string): void | Promise<void>;
  /** Requests this process admitted and has not yet settled, over all organizations. */
  inFlight(): number;
  /** Tokens this process reserved and has not yet settled, over all organizations. */
  reservedTokens(): number;
  /** What stops admission now (a shared store that does not answer); empty when nothing does. */
  problems?(): Promise<string[]>;
  /** Stops its timers; a shared store first delivers the settles not yet delivered, so no place stays taken. */
  close?(): void | Promise<void>;
}

export type { LedgerBucket };
