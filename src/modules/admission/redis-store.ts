import type { PlanConfig } from "../../config/schema";
import { SluiceError } from "../../errors";
import { keyPrefix, type RedisConnection, type RedisReply } from "../../storage/redis";
import type { UsageRepository } from "../../storage/types";
import { withTimeout } from "../../storage/with-timeout";
import { formatReset, OutputEstimate, quotaRejection } from "./memory-store";
import { monthOf, startOfNextMonth } from "./month";
import type { AdmissionRequest, AdmissionStore, LedgerBucket, Lease, SpentTokens, UsageSnapshot } from "./store";
import { bucketMs, fiveHoursMs } from "./window";
import { LeaseKeeper, leaseMs } from "./lease-keeper";

const readyKey = `${keyPrefix}ready`;
const rebuildLockKey = `${keyPrefix}rebuilding`;
/** How long a request waits for another instance to finish rebuilding the state after Redis lost it. */
const rebuildWaitMs = 3000;
/** Settles that Redis did not take are retried this often, and given up after this long (their leases expire anyway). */
const settleRetryMs = 1000;
const settleGiveUpMs = 10 * 60_000;

function organizationKeys(organizationId: string): string[] {
  const base = `${keyPrefix}org:{${organizationId}}:`;
  return [`${base}state`, `${base}minutes`, `${base}lasts`, `${base}leases`, `${base}reservations`];
}

/** Admission can't be decided: Redis does not answer. Requests are refused, never admitted without limits. */
export function admissionUnavailable(cause: unknown): SluiceError {
  return new SluiceError("server_overloaded", "The gateway cannot check quotas right now (its shared admission store does not answer). Retry shortly.", {
    retryAfterSeconds: 2,
    cause,
  });
}

interface AdmitReply {
  status: number;
  now: number;
  windowUsed: number;
  reserved: number;
  reservation: number;
  untilEmpty: number;
  wait: number;
  monthUsed: number;
  inFlight: number;
}

function readReply(reply: RedisReply): AdmitReply {
  const values = (reply as number[]).map(Number);
  const [status = 9, now = 0, windowUsed = 0, reserved = 0, reservation = 0, untilEmpty = 0, wait = 0, monthUsed = 0, inFlight = 0] = values;
  return { status, now, windowUsed, reserved, reservation, untilEmpty, wait, monthUsed, inFlight };
}

interface PendingSettle {
  keys: string[];
  args: (string | number)[];
  since: number;
}

/**
 * Admission shared by every instance, in Redis: one Lua script checks both quotas and the concurrency cap, reserves
 * and takes a lease, atomically and on Redis's clock; another settles. Leases expire unless this instance renews
 * them (see LeaseKeeper), so the places held by an instance that died come back by themselves. If Redis lost its
 * data, the first request that notices rebuilds every organization's usage from the PostgreSQL ledger first.
 */
export class RedisAdmissionStore implements AdmissionStore {
  private readonly estimate = new OutputEstimate();
  private readonly keeper: LeaseKeeper;
  private localInFlight = 0;
  private localReserved = 0;
  private rebuilding: Promise<void> | undefined;
  private pendingSettles: PendingSettle[] = [];
  private readonly retryTimer: Timer;

  constructor(
    private readonly redis: RedisConnection,
    private readonly usage: UsageRepository,
  ) {
    this.keeper = new LeaseKeeper(redis);
    this.retryTimer = setInterval(() => void this.retrySettles(), settleRetryMs);
    this.retryTimer.unref();
  }

  async admit(request: AdmissionRequest, _now: number): Promise<Lease> {
    const plan = request.plan;
    const leaseId = crypto.randomUUID();
    const keys = organizationKeys(request.organizationId);
    const wanted = plan.tokensPer5h === undefined && plan.tokensPerMonth === undefined ? 0 : request.promptTokens + this.estimate.expected(request.modelId, request.maxTokens);
    const args = ["admit", request.promptTokens + 1, plan.tokensPer5h ?? -1, plan.tokensPerMonth ?? -1, plan.maxConcurrency ?? -1, wanted, leaseId, leaseMs];
    let reply = await this.run(keys, args);
    if (reply.status === 9) {
      await this.rebuildOnce();
      reply = await this.run(keys, args);
      if (reply.status === 9) throw admissionUnavailable(new Error("the admission state is being rebuilt from the ledger"));
    }
    if (reply.status !== 0) {
      throw quotaRejection(reply.status === 1 ? "month" : reply.status === 2 ? "five_hour" : "concurrency", plan, {
        fiveHourWaitMs: reply.wait,
        monthResetMs: startOfNextMonth(reply.now) - reply.now,
      });
    }
    this.keeper.hold(keys[3] as string, leaseId);
    this.localInFlight++;
    this.localReserved += reply.reservation;
    const headers: Record<string, string> = {};
    if (plan.tokensPer5h !== undefined) {
      headers["x-ratelimit-limit-tokens"] = String(plan.tokensPer5h);
      headers["x-ratelimit-remaining-tokens"] = String(Math.max(0, plan.tokensPer5h - reply.windowUsed - reply.reserved));
      headers["x-ratelimit-reset-tokens"] = formatReset(reply.untilEmpty || (reply.windowUsed + reply.reserved > 0 ? fiveHoursMs : 0));
    }
    let settled = false;
    return {
      reservedTokens: reply.reservation,
      headers,
      settle: (spent: SpentTokens | null) => {
        if (settled) return;
        settled = true;
        this.keeper.release(leaseId);
        this.localInFlight--;
        this.localReserved -= reply.reservation;
        if (spent) this.estimate.observe(request.modelId, spent.completionTokens);
        const tokens = spent ? spent.promptTokens + spent.completionTokens : -1;
        this.settleInRedis([...keys, `${keyPrefix}settled:${leaseId}`], [leaseId, tokens]);
      },
    };
  }

  async snapshot(organizationId: string, plan: PlanConfig, _now: number): Promise<UsageSnapshot> {
    const keys = organizationKeys(organizationId);
    let reply = await this.run(keys, ["peek", 0, -1, -1, -1, 0, "", 0]);
    if (reply.status === 9) {
      await this.rebuildOnce();
      reply = await this.run(keys, ["peek", 0, -1, -1, -1, 0, "", 0]);
    }
    const remaining = (limit: number | undefined, used: number) => (limit === undefined ? undefined : Math.max(0, limit - used - reply.reserved));
    return {
      fiveHours: { used: reply.windowUsed, limit: plan.tokensPer5h, remaining: remaining(plan.tokensPer5h, reply.windowUsed), resetsAt: reply.now + reply.untilEmpty },
      month: { used: reply.monthUsed, limit: plan.tokensPerMonth, remaining: remaining(plan.tokensPerMonth, reply.monthUsed), resetsAt: startOfNextMonth(reply.now) },
      reserved: reply.reserved,
      inFlight: reply.inFlight,
    };
  }

  async reset(organizationId: string): Promise<void> {
    await this.restore(organizationId, [], 0, Date.now());
  }

  async restore(organizationId: string, buckets: LedgerBucket[], monthTokens: number, monthStart: number): Promise<void> {
    const keys = organizationKeys(organizationId).slice(0, 3);
    const args: (string | number)[] = [monthOf(monthStart), monthTokens];
    for (const bucket of buckets) args.push(Math.floor(bucket.lastTime / bucketMs), bucket.tokens, bucket.lastTime);
    await this.redis.script("restore", keys, args);
  }

  inFlight(): number {
    return this.localInFlight;
  }

  reservedTokens(): number {
    return this.localReserved;
  }

  /** Stops renewing leases (they expire) and retrying settles. */
  close(): void {
    clearInterval(this.retryTimer);
    this.keeper.close();
  }

  /** Whether Redis answers, for /readyz. */
  async problems(): Promise<string[]> {
    try {
      await this.redis.call("PING", []);
      return [];
    } catch (error) {
      return [`Redis does not answer: ${(error as Error).message}`];
    }
  }

  private async run(keys: string[], args: (string | number)[]): Promise<AdmitReply> {
    try {
      return readReply(await this.redis.script("admit", [...keys, readyKey], args));
    } catch (error) {
      throw admissionUnavailable(error);
    }
  }

  private settleInRedis(keys: string[], args: (string | number)[]): void {
    this.redis.script("settle", keys, args).catch(() => {
      // Redis did not take it: tried again until it does (the marker key makes a repeat harmless).
      this.pendingSettles.push({ keys, args, since: Date.now() });
    });
  }

  private async retrySettles(): Promise<void> {
    if (this.pendingSettles.length === 0 || !this.redis.connected) return;
    const pending = this.pendingSettles;
    this.pendingSettles = [];
    for (const settle of pending) {
      if (Date.now() - settle.since > settleGiveUpMs) continue;
      await this.redis.script("settle", settle.keys, settle.args).catch(() => this.pendingSettles.push(settle));
    }
  }

  /** One rebuild at a time in this instance; across instances, a lock in Redis lets one do it while others wait. */
  private rebuildOnce(): Promise<void> {
    this.rebuilding ??= withTimeout(this.rebuild(), rebuildWaitMs, "the admission rebuild")
      .catch(() => {})
      .finally(() => {
        this.rebuilding = undefined;
      });
    return this.rebuilding;
  }

  private async rebuild(): Promise<void> {
    const owner = crypto.randomUUID();
    const locked = await this.redis.call("SET", [rebuildLockKey, owner, "NX", "PX", "30000"]);
    if (locked === null) {
      // Another instance is rebuilding: wait for it.
      const deadline = Date.now() + rebuildWaitMs;
      while (Date.now() < deadline && (await this.redis.call("EXISTS", [readyKey])) === 0) await Bun.sleep(20);
      return;
    }
    try {
      const now = Number(((await this.redis.call("TIME", [])) as string[])[0]) * 1000;
      const usage = await this.usage.read(now);
      await Promise.all([...usage].map(([organizationId, entry]) => this.restore(organizationId, entry.buckets, entry.monthTokens, now)));
      await this.redis.call("SET", [readyKey, String(now)]);
    } finally {
      await this.redis.call("DEL", [rebuildLockKey]).catch(() => {});
    }
  }
}
