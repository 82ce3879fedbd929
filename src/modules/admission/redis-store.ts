import type { PlanConfig } from "../../config/schema";
import { SluiceError } from "../../errors";
import { keyPrefix, type RedisConnection, type RedisReply } from "../../storage/redis";
import type { UsageRepository } from "../../storage/types";
import { withTimeout } from "../../storage/with-timeout";
import { OutputEstimate } from "./estimate";
import { leaseMs, type LeaseKeeper } from "./lease-keeper";
import { monthOf, startOfNextMonth } from "./month";
import { quotaRejection, rateLimitHeaders, usageSnapshot } from "./quota-answers";
import type { AdmissionRequest, AdmissionStore, LedgerBucket, Lease, SpentTokens, UsageSnapshot } from "./store";
import { bucketMs } from "./window";

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
  /** Which rebuild of the state this answer came from (see settle.lua). */
  generation: string;
}

function readReply(reply: RedisReply): AdmitReply {
  const values = reply as (number | string)[];
  const [status = 9, now = 0, windowUsed = 0, reserved = 0, reservation = 0, untilEmpty = 0, wait = 0, monthUsed = 0, inFlight = 0] = values.slice(0, 9).map(Number);
  return { status, now, windowUsed, reserved, reservation, untilEmpty, wait, monthUsed, inFlight, generation: String(values[9] ?? "") };
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
  private localInFlight = 0;
  private localReserved = 0;
  private rebuilding: Promise<void> | undefined;
  private pendingSettles: PendingSettle[] = [];
  private readonly retryTimer: Timer;

  constructor(
    private readonly redis: RedisConnection,
    private readonly usage: UsageRepository,
    /** Renews this instance's leases; the CLI, which holds none, passes none. */
    private readonly keeper?: LeaseKeeper,
  ) {
    this.retryTimer = setInterval(() => void this.retrySettles(), settleRetryMs);
    this.retryTimer.unref();
  }

  async admit(request: AdmissionRequest, _now: number): Promise<Lease> {
    const plan = request.plan;
    const leaseId = crypto.randomUUID();
    const keys = organizationKeys(request.organizationId);
    const wanted = plan.tokensPer5h === undefined && plan.tokensPerMonth === undefined ? 0 : request.promptTokens + this.estimate.expected(request.modelId, request.maxTokens);
    const args = ["admit", request.promptTokens + 1, plan.tokensPer5h ?? -1, plan.tokensPerMonth ?? -1, plan.maxConcurrency ?? -1, wanted, leaseId, leaseMs];
    const reply = await this.runRebuilt(keys, args);
    if (reply.status !== 0) {
      throw quotaRejection(reply.status === 1 ? "month" : reply.status === 2 ? "five_hour" : "concurrency", plan, {
        fiveHourWaitMs: reply.wait,
        monthResetMs: startOfNextMonth(reply.now) - reply.now,
      });
    }
    this.keeper?.hold(keys[3] as string, leaseId);
    this.localInFlight++;
    this.localReserved += reply.reservation;
    let settled = false;
    return {
      reservedTokens: reply.reservation,
      headers: rateLimitHeaders(plan, reply),
      settle: (spent: SpentTokens | null) => {
        if (settled) return;
        settled = true;
        this.keeper?.release(leaseId);
        this.localInFlight--;
        this.localReserved -= reply.reservation;
        if (spent) this.estimate.observe(request.modelId, spent.completionTokens);
        const tokens = spent ? spent.promptTokens + spent.completionTokens : -1;
        this.settleInRedis([...keys, `${keyPrefix}settled:${leaseId}`, readyKey], [leaseId, tokens, reply.generation]);
      },
    };
  }

  async snapshot(organizationId: string, plan: PlanConfig, _now: number): Promise<UsageSnapshot> {
    const keys = organizationKeys(organizationId);
    return usageSnapshot(plan, await this.runRebuilt(keys, ["peek", 0, -1, -1, -1, 0, "", 0]));
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

  /** Stops retrying settles. */
  close(): void {
    clearInterval(this.retryTimer);
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

  /** Runs admit.lua; if Redis lost its data, rebuilds the state from the ledger first (503 if that fails). */
  private async runRebuilt(keys: string[], args: (string | number)[]): Promise<AdmitReply> {
    let reply = await this.run(keys, args);
    if (reply.status === 9) {
      await this.rebuildOnce();
      reply = await this.run(keys, args);
      if (reply.status === 9) throw admissionUnavailable(new Error("the admission state is being rebuilt from the ledger"));
    }
    return reply;
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
      // A new generation: leases of the lost one settle without recording anything (see settle.lua).
      await this.redis.call("SET", [readyKey, `${now}-${owner}`]);
    } finally {
      await this.redis.call("DEL", [rebuildLockKey]).catch(() => {});
    }
  }
}
