import type { PlanConfig } from "../../config/schema";
import { SluiceError } from "../../errors";
import { generationKey, keyPrefix, type RedisConnection, type RedisReply } from "../../storage/redis";
import { ScriptBatches } from "../../storage/redis-batches";
import type { KeyRepository, UsageRepository } from "../../storage/types";
import { restoreLimitedKeys } from "./ledger-usage";
import { withTimeout } from "../../storage/with-timeout";
import { OutputEstimate } from "./estimate";
import { quotaTokens } from "./quota-weight";
import { minuteMs, replayStarts } from "./request-rate";
import { leaseMs, type LeaseKeeper, type LeaseSets, rebuiltChannel } from "./lease-keeper";
import { bucketMs, monthOf, startOfNextMonth } from "../../usage-periods";
import { quotaRejection, rateLimitHeaders, usageSnapshot, type QuotaState } from "./quota-answers";
import {
  hasQuota,
  type AdmissionRequest,
  type AdmissionStore,
  type KeyAdmission,
  type LedgerBucket,
  type Lease,
  type Limits,
  type RejectionKind,
  type SpentTokens,
  type UsageSnapshot,
} from "./store";

const rebuildLockKey = `${keyPrefix}rebuilding`;
/** How long a request waits for another instance to finish rebuilding the state after Redis lost it. */
const rebuildWaitMs = 3000;
/** Settles that Redis did not take are retried this often, and given up after this long (their leases expire anyway). */
const settleRetryMs = 1000;
/** How long closing waits for settles to reach Redis, and how often it looks. */
const closeFlushMs = 5000;
const closePollMs = 25;
const settleGiveUpMs = 10 * 60_000;

/** The keys of one subject: an organization, or (with `keyId`) one of its keys with caps of its own. */
export function subjectKeys(organizationId: string, keyId?: string): string[] {
  // The organization's hash tag keeps its keys' state in the same slot, so one script can touch both.
  const base = `${keyPrefix}org:{${organizationId}}:${keyId === undefined ? "" : `key:${keyId}:`}`;
  return [`${base}state`, `${base}minutes`, `${base}lasts`, `${base}leases`, `${base}reservations`, `${base}expired`];
}

/** Where a subject's state, leases, reservations and expired set are among its keys. */
const stateIndex = 0;
const leasesIndex = 3;
const reservationsIndex = 4;
const expiredIndex = 5;

/**
 * At most this many organizations' and capped keys' script keys are kept (15 key names for a capped key); the oldest
 * made is dropped first. Without a bound, an instance serving a million capped keys would keep them all.
 */
export const cachedSubjects = 10_000;

/** What admit.lua and settle.lua take for a request: the generation's key, then each of its subjects' keys. */
interface Subjects {
  /** Names the set in one process (its organization and capped key), for batching. */
  id: string;
  scriptKeys: string[];
  /**
   * For the keeper: the leases sets a lease lives in (the organization's, and its key's when the key has caps), each
   * with the expired set, state and reservations beside it.
   */
  leaseSets: LeaseSets;
}

function subjectsOf(id: string, organizationId: string, keyId: string | undefined): Subjects {
  const organization = subjectKeys(organizationId);
  if (keyId === undefined) return { id, scriptKeys: [generationKey, ...organization], leaseSets: leaseSetsOf(organization) };
  const key = subjectKeys(organizationId, keyId);
  return { id, scriptKeys: [generationKey, ...organization, ...key], leaseSets: [...leaseSetsOf(organization), ...leaseSetsOf(key)] };
}

/** A subject's four keys for the keeper (see LeaseSets). */
function leaseSetsOf(keys: string[]): string[] {
  return [leasesIndex, expiredIndex, stateIndex, reservationsIndex].map((index) => keys[index] as string);
}

function limitArgs(limits: Limits): number[] {
  return [limits.tokensPer5h ?? -1, limits.tokensPerMonth ?? -1, limits.maxConcurrency ?? -1, limits.requestsPerMinute ?? -1];
}

/** An organization's requests per minute now, by its plan; undefined when it has none (or is gone). */
export type OrganizationRate = (organizationId: string) => Promise<number | undefined>;

/** Admission can't be decided: Redis does not answer. Requests are refused, never admitted without limits. */
export function admissionUnavailable(cause: unknown): SluiceError {
  return new SluiceError("server_overloaded", "The gateway cannot check quotas right now (its shared admission store does not answer). Retry shortly.", {
    retryAfterSeconds: 2,
    cause,
  });
}

/** One subject's state in admit.lua's answer. */
interface SubjectReply extends QuotaState {
  wait: number;
}

interface AdmitReply {
  status: number;
  /** Which subject refused: 1 the organization, 2 the key. */
  refused: number;
  now: number;
  /** Which rebuild of the state this answer came from (see settle.lua). */
  generation: string;
  reservation: number;
  subjects: SubjectReply[];
}

/** The values of one subject in admit.lua's answer. */
const subjectWidth = 8;

function readReply(reply: RedisReply): AdmitReply {
  const values = reply as (number | string)[];
  const [status = 9, refused = 0, now = 0] = values.slice(0, 3).map(Number);
  const subjects: SubjectReply[] = [];
  for (let index = 5; index + subjectWidth <= values.length; index += subjectWidth) {
    const [windowUsed = 0, reserved = 0, untilEmpty = 0, wait = 0, monthUsed = 0, inFlight = 0, held = 0, at = -1] = values
      .slice(index, index + subjectWidth)
      .map(Number);
    subjects.push({ now, windowUsed, reserved, untilEmpty, wait, monthUsed, inFlight, requests: { held, at } });
  }
  return { status, refused, now, generation: String(values[3] ?? ""), reservation: Number(values[4] ?? 0), subjects };
}

/** The limit that refused, by admit.lua's status. */
const refusalKinds: Record<number, RejectionKind> = { 1: "month", 2: "five_hour", 3: "concurrency", 4: "requests" };

interface PendingSettle {
  subjects: Subjects;
  generation: string;
  leaseId: string;
  tokens: number;
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
  private readonly admits: ScriptBatches;
  /** Organizations' (and capped keys') script keys, each made once while it stays among the last `cachedSubjects`. */
  private readonly subjects = new Map<string, Subjects>();
  private readonly settles: ScriptBatches;

  constructor(
    private readonly redis: RedisConnection,
    private readonly usage: UsageRepository,
    /** The keys with caps of their own, rebuilt with their organizations. */
    private readonly keys: KeyRepository,
    /** Renews this instance's leases; the CLI, which holds none, passes none. */
    private readonly keeper?: LeaseKeeper,
    /** An organization's requests per minute now (its plan's): a rebuild replays the last minute's requests at it. */
    private readonly organizationRate?: OrganizationRate,
  ) {
    this.settles = new ScriptBatches(redis, "settle", "whole");
    // A request that ended and the next one from the same client: its place must be free when that one is admitted.
    this.admits = new ScriptBatches(redis, "admit", "each", () => this.settles.sendWaiting());
    this.retryTimer = setInterval(() => this.retrySettles(), settleRetryMs);
    this.retryTimer.unref();
  }

  async admit(request: AdmissionRequest, _now: number): Promise<Lease> {
    const plan = request.plan;
    const leaseId = crypto.randomUUID();
    const key = request.key;
    const subjects = this.subjectsOf(request.organizationId, key?.id);
    const wanted =
      hasQuota(plan) || (key && hasQuota(key.limits))
        ? quotaTokens(request.promptTokens + this.estimate.expected(request.modelId, request.maxTokens), request.weight ?? 1)
        : 0;
    const head = ["admit", leaseMs, ...limitArgs(plan), ...(key ? limitArgs(key.limits) : [])];
    const batch = `${subjects.id}\n${head.join(" ")}`;
    const values = [quotaTokens(request.promptTokens, request.weight ?? 1) + 1, wanted, leaseId];
    const reply = await this.runRebuilt(() => this.admits.run(batch, subjects.scriptKeys, head, values));
    this.keeper?.sawGeneration(reply.generation);
    if (reply.status !== 0) {
      const byKey = reply.refused === 2 && key !== undefined;
      const kind = refusalKinds[reply.status] ?? "concurrency";
      // admit.lua gives the refusing subject's wait for the 5-hour window and the requests per minute.
      const waitMs = kind === "month" ? startOfNextMonth(reply.now) - reply.now : reply.subjects[reply.refused - 1]?.wait;
      throw quotaRejection(kind, byKey ? key.limits : plan, waitMs, byKey ? "key" : "organization");
    }
    this.keeper?.hold(subjects.leaseSets, leaseId, reply.generation, reply.reservation);
    this.localInFlight++;
    this.localReserved += reply.reservation;
    let settled = false;
    return {
      reservedTokens: reply.reservation,
      headers: rateLimitHeaders(
        { limits: plan, state: reply.subjects[0] as QuotaState },
        key ? { limits: key.limits, state: reply.subjects[1] as QuotaState } : undefined,
      ),
      settle: (spent: SpentTokens | null, _at: number, weight = 1) => {
        if (settled) return;
        settled = true;
        // A renewal may have moved the lease into a new generation (see LeaseKeeper).
        const generation = this.keeper?.release(leaseId) ?? reply.generation;
        this.localInFlight--;
        this.localReserved -= reply.reservation;
        if (spent) this.estimate.observe(request.modelId, spent.completionTokens);
        const tokens = spent ? quotaTokens(spent.promptTokens + spent.completionTokens, weight) : -1;
        this.settleInRedis({ subjects, generation, leaseId, tokens, since: Date.now() });
      },
    };
  }

  async snapshot(organizationId: string, plan: PlanConfig, _now: number): Promise<UsageSnapshot> {
    return usageSnapshot(plan, await this.peek(this.subjectsOf(organizationId, undefined).scriptKeys));
  }

  async keySnapshot(organizationId: string, key: KeyAdmission, _now: number): Promise<UsageSnapshot> {
    // The key's subject alone: admit.lua then reads it as it reads an organization.
    return usageSnapshot(key.limits, await this.peek([generationKey, ...subjectKeys(organizationId, key.id)]));
  }

  async restore(organizationId: string, buckets: LedgerBucket[], monthTokens: number, monthStart: number, keyId?: string): Promise<void> {
    const keys = subjectKeys(organizationId, keyId).slice(0, 3);
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

  /**
   * Delivers the settles still on their way (sent, waiting for a batch, or waiting for a retry), then stops retrying:
   * a settle lost when the process exits would keep its place and reservation taken until its lease expired (15 s),
   * and an instance restarted at once would find its organization's concurrency full. Gives up after
   * `closeFlushMs`, or at once when Redis is not connected: the leases then expire by themselves.
   */
  async close(): Promise<void> {
    const deadline = Date.now() + closeFlushMs;
    while ((this.pendingSettles.length > 0 || this.settles.busy()) && this.redis.connected && Date.now() < deadline) {
      this.retrySettles();
      await Bun.sleep(closePollMs);
    }
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

  private async peek(scriptKeys: string[]): Promise<QuotaState> {
    return (await this.runRebuilt(() => this.redis.script("admit", scriptKeys, ["peek", 0]).then((answers) => (answers as RedisReply[])[0] ?? null)))
      .subjects[0] as QuotaState;
  }

  /**
   * Runs admit.lua through `call` (a request batched with others on the same keys, or a peek alone); if Redis lost its
   * data, rebuilds the state from the ledger first (503 if that fails).
   */
  private async runRebuilt(call: () => Promise<RedisReply>): Promise<AdmitReply> {
    let reply = await this.run(call);
    if (reply.status === 9) {
      await this.rebuildOnce();
      reply = await this.run(call);
      if (reply.status === 9) throw admissionUnavailable(new Error("the admission state is being rebuilt from the ledger"));
    }
    return reply;
  }

  private async run(call: () => Promise<RedisReply>): Promise<AdmitReply> {
    try {
      const reply = await call();
      if (!Array.isArray(reply)) throw new Error("admit.lua answered without a list");
      return readReply(reply);
    } catch (error) {
      throw admissionUnavailable(error);
    }
  }

  private subjectsOf(organizationId: string, keyId: string | undefined): Subjects {
    const id = keyId === undefined ? organizationId : `${organizationId}\n${keyId}`;
    let subjects = this.subjects.get(id);
    if (subjects === undefined) {
      subjects = subjectsOf(id, organizationId, keyId);
      if (this.subjects.size >= cachedSubjects) this.subjects.delete(this.subjects.keys().next().value as string);
      this.subjects.set(id, subjects);
    }
    return subjects;
  }

  private settleInRedis(settle: PendingSettle): void {
    const subjects = settle.subjects;
    this.settles.run(`${subjects.id}\n${settle.generation}`, subjects.scriptKeys, [settle.generation], [settle.leaseId, settle.tokens]).catch(() => {
      // Redis did not take it: tried again until it does (a lease settles once, however often it is sent).
      this.pendingSettles.push(settle);
    });
  }

  private retrySettles(): void {
    if (this.pendingSettles.length === 0 || !this.redis.connected) return;
    const pending = this.pendingSettles;
    this.pendingSettles = [];
    for (const settle of pending) if (Date.now() - settle.since <= settleGiveUpMs) this.settleInRedis(settle);
  }

  /**
   * The requests-per-minute buckets of the organizations and paced keys that made requests in the last minute, replayed
   * from the ledger (see replayStarts) into their state, as a single instance does at start: a Redis that lost its data
   * does not hand every organization a fresh minute's worth.
   */
  private async restoreRequestRates(now: number, organizationRate: OrganizationRate): Promise<void> {
    const since = now - minuteMs;
    const starts = await this.usage.startsSince(since);
    if (starts.length === 0) return;
    const keyRates = new Map<string, number>();
    for (const key of await this.keys.limited()) if (key.requestsPerMinute !== null) keyRates.set(key.id, key.requestsPerMinute);
    const organizations = new Map<string, number[]>();
    const keys = new Map<string, { organizationId: string; rate: number; times: number[] }>();
    for (const { organizationId, keyId, startedAt } of starts) {
      const times = organizations.get(organizationId);
      if (times) times.push(startedAt);
      else organizations.set(organizationId, [startedAt]);
      const rate = keyRates.get(keyId);
      if (rate === undefined) continue;
      const key = keys.get(keyId);
      if (key) key.times.push(startedAt);
      else keys.set(keyId, { organizationId, rate, times: [startedAt] });
    }
    const write = (keyNames: string[], rate: number, times: number[]) => {
      const bucket = replayStarts(rate, since, times);
      return this.redis.call("HSET", [keyNames[stateIndex] as string, "requests_held", String(bucket.held), "requests_at", String(bucket.at)]);
    };
    for (const [organizationId, times] of organizations) {
      const rate = await organizationRate(organizationId);
      if (rate !== undefined) await write(subjectKeys(organizationId), rate, times);
    }
    for (const [keyId, key] of keys) await write(subjectKeys(key.organizationId, keyId), key.rate, key.times);
  }

  /** One rebuild at a time in this instance; across instances, a lock in Redis lets one do it while others wait. */
  private rebuildOnce(): Promise<void> {
    this.rebuilding ??= withTimeout(this.rebuildFromLedger(), rebuildWaitMs, "the admission rebuild")
      .catch(() => {})
      .finally(() => {
        this.rebuilding = undefined;
      });
    return this.rebuilding;
  }

  /**
   * Rebuilds every organization's (and capped key's) usage in Redis from the ledger, unless the state is already
   * there: asked for by a request that found it missing, which another instance may have rebuilt since.
   */
  async rebuildFromLedger(): Promise<void> {
    const owner = crypto.randomUUID();
    const locked = await this.redis.call("SET", [rebuildLockKey, owner, "NX", "PX", "30000"]);
    if (locked === null) {
      // Another instance is rebuilding: wait for it.
      const deadline = Date.now() + rebuildWaitMs;
      while (Date.now() < deadline && (await this.redis.call("EXISTS", [generationKey])) === 0) await Bun.sleep(20);
      return;
    }
    try {
      // Rebuilt by another instance between this one's look and its lock: a second rebuild would start a new
      // generation, and the settles of every request admitted in between would be dropped with their leases held.
      if ((await this.redis.call("EXISTS", [generationKey])) === 1) return;
      const now = Number(((await this.redis.call("TIME", [])) as string[])[0]) * 1000;
      const usage = await this.usage.read(now);
      await Promise.all([...usage].map(([organizationId, entry]) => this.restore(organizationId, entry.buckets, entry.monthTokens, now)));
      await restoreLimitedKeys(this, this.keys, this.usage, now);
      if (this.organizationRate) await this.restoreRequestRates(now, this.organizationRate);
      // A new generation: leases of the lost one settle without recording anything (see settle.lua), unless a
      // renewal moved them into this one first (see LeaseKeeper).
      await this.redis.call("SET", [generationKey, `${now}-${owner}`]);
      // This instance's requests under way count again before the admissions that waited for the rebuild go on; every
      // other instance's, as soon as it hears of it.
      await this.keeper?.renew();
      await this.redis.call("PUBLISH", [rebuiltChannel, owner]).catch(() => {});
    } finally {
      await this.redis.call("DEL", [rebuildLockKey]).catch(() => {});
    }
  }
}
