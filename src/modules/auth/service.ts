import type { BlockList } from "node:net";
import type { PlanConfig } from "../../config/schema";
import { ClientAddresses } from "../../http/client-address";
import { SluiceError } from "../../errors";
import type { ChangeFeed, KeyCredentials, KeyLimits, KeyRepository } from "../../storage/types";
import type { Limits } from "../admission/store";
import { hashesEqual, hashKeySecret, keyPrefix } from "../keys/secret";
import { networkList } from "../keys/networks";
import { hasLimits } from "../keys/service";

/** Who is asking: the key, its organization and the organization's plan. */
export interface Caller {
  keyId: string;
  organizationId: string;
  organizationName: string;
  plan: PlanConfig;
  /** The key's own caps, when it has any. */
  keyLimits?: Limits;
  /** The models the key may call within its plan's, when it names them (see ModelRegistry). */
  keyModels?: ReadonlySet<string>;
  /**
   * The networks the key may be used from, when it or its organization names them: the key's own list replaces its
   * organization's, as OpenAI's project allowlist replaces its organization's (see authenticateRequest).
   */
  networks?: { list: BlockList; of: "key" | "organization" };
}

/** A key's caps as admission reads them; undefined when it has none (most keys: no object is made for them). */
export function keyLimitsOf(limits: KeyLimits): Limits | undefined {
  if (!hasLimits(limits)) return undefined;
  return {
    maxConcurrency: limits.maxConcurrency ?? undefined,
    tokensPer5h: limits.tokensPer5h ?? undefined,
    tokensPerMonth: limits.tokensPerMonth ?? undefined,
    requestsPerMinute: limits.requestsPerMinute ?? undefined,
  };
}

/** The networks a key is bound to: its own, else its organization's; undefined when neither names any. */
function networksOf(record: KeyCredentials): Caller["networks"] {
  if (record.networks !== null) return { list: networkList(record.networks), of: "key" };
  if (record.organizationNetworks !== null) return { list: networkList(record.organizationNetworks), of: "organization" };
  return undefined;
}

const maxCachedKeys = 100_000;

/** A key as the cache holds it: its stored hash as bytes for the comparison, and its caller, made once. */
interface CachedKey {
  credentials: KeyCredentials;
  hashBytes: Buffer;
  /** Undefined while the key cannot be used (then every request goes through the checks that say why). */
  caller: Caller | undefined;
}

function invalidKey(): SluiceError {
  return new SluiceError("invalid_api_key", "Incorrect API key provided. Check the key, or create a new one in the console.");
}
const lastUsedFlushMs = 1000;

/**
 * Turns a bearer key into a Caller. Keys are looked up by SHA-256 hash, first in memory, then with one indexed
 * query; the cache is dropped whenever the change feed says another process changed keys or organizations (SQLite:
 * the `change_counter` row; shared mode: the epoch in Redis), so a revocation anywhere applies to the very next
 * request. The feed is read once per turn of the event loop, by the first request the turn serves: the others of
 * that turn arrived before it was read (see checkChanges). `last_used_at` is written in batches, once a second.
 */
export class AuthService {
  private readonly cache = new Map<string, CachedKey>();
  private readonly lastUsed = new Map<string, number>();
  private readonly flushTimer: Timer;
  /** Whether this turn of the event loop has read the change feed, and what the read returned. */
  private checkedThisTurn = false;
  private turnCheck: void | Promise<void> = undefined;
  private readonly endTurn = () => {
    this.checkedThisTurn = false;
    this.turnCheck = undefined;
  };

  constructor(
    private readonly keys: KeyRepository,
    private readonly changes: ChangeFeed,
    private readonly plans: ReadonlyMap<string, PlanConfig>,
    /** Writes [key id, time] pairs of last use; off the request path (the ledger's writer), as it is a write. */
    private readonly touchKeys: (entries: [string, number][]) => void,
    /** Where requests come from, for keys bound to networks (SLUICE_TRUSTED_PROXIES behind proxies). */
    readonly addresses: ClientAddresses = new ClientAddresses(undefined),
  ) {
    changes.onChange(() => this.cache.clear());
    this.flushTimer = setInterval(() => this.flushLastUsed(), lastUsedFlushMs);
    this.flushTimer.unref();
  }

  /**
   * Throws missing_api_key, invalid_api_key or organization_inactive; returns the caller otherwise. Synchronous
   * when the key is cached and nothing changed (SQLite mode's hot path), a promise otherwise.
   */
  authenticate(bearer: string | undefined, now = Date.now()): Caller | Promise<Caller> {
    if (!bearer)
      throw new SluiceError(
        "missing_api_key",
        "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY' (the Anthropic routes also take 'x-api-key: YOUR_KEY').",
      );
    if (!bearer.startsWith(keyPrefix)) throw invalidKey();
    const hash = hashKeySecret(bearer);
    let checked: void | Promise<void>;
    try {
      checked = this.checkChanges();
    } catch (error) {
      throw this.unavailable(error);
    }
    if (checked === undefined) {
      const cached = this.cache.get(hash);
      if (cached) return this.callerOf(cached, hash, now);
    }
    return this.authenticateSlowly(checked, hash, now);
  }

  /**
   * Reads the change feed unless this turn of the event loop already did; the requests of one turn share that read
   * (a statement, or a Redis round trip, was 14% of a whole answer's time on the event loop). That is as fresh as a
   * read per request: a turn serves the requests whose bytes were there when it polled its sockets, before its first
   * read of the feed, and setImmediate ends the turn before the next poll. bench/HISTORY.md has the test of it.
   */
  private checkChanges(): void | Promise<void> {
    if (this.checkedThisTurn) return this.turnCheck;
    const checked = this.changes.check();
    this.checkedThisTurn = true;
    this.turnCheck = checked;
    setImmediate(this.endTurn);
    return checked;
  }

  private async authenticateSlowly(checked: void | Promise<void>, hash: string, now: number): Promise<Caller> {
    try {
      await checked;
    } catch (error) {
      throw this.unavailable(error);
    }
    let cached = this.cache.get(hash);
    if (!cached) {
      let record: KeyCredentials | undefined;
      try {
        record = await this.keys.credentials(hash);
      } catch (error) {
        throw this.unavailable(error);
      }
      if (!record) throw invalidKey();
      cached = { credentials: record, hashBytes: Buffer.from(record.hash), caller: undefined };
      if (this.cache.size >= maxCachedKeys) this.cache.clear();
      this.cache.set(hash, cached);
    }
    return this.callerOf(cached, hash, now);
  }

  /** The caller of a usable key; the same object for every request until the cache is dropped (callers are read-only). */
  private callerOf(cached: CachedKey, hash: string, now: number): Caller {
    const record = cached.credentials;
    if (!hashesEqual(cached.hashBytes, hash)) throw invalidKey();
    // Expiry is checked on every request: a cached caller does not outlive its key.
    if (record.expiresAt !== null && record.expiresAt <= now) throw invalidKey();
    cached.caller ??= this.newCaller(record);
    this.lastUsed.set(record.keyId, now);
    return cached.caller;
  }

  private newCaller(record: KeyCredentials): Caller {
    if (record.revokedAt !== null) throw invalidKey();
    if (record.organizationStatus !== "active") {
      throw new SluiceError(
        "organization_inactive",
        record.organizationStatus === "waitlist"
          ? "Your organization is on the waitlist; keys work once an operator activates it."
          : "Your organization is suspended; contact the operator.",
      );
    }
    const plan = this.plans.get(record.planId);
    if (!plan) throw new SluiceError("organization_inactive", `Your organization's plan "${record.planId}" is not configured; contact the operator.`);
    return {
      keyId: record.keyId,
      organizationId: record.organizationId,
      organizationName: record.organizationName,
      plan,
      keyLimits: keyLimitsOf(record),
      keyModels: record.models === null ? undefined : new Set(record.models),
      networks: networksOf(record),
    };
  }

  /** A failure to look for changes (Redis down), as the caller's error. */
  private unavailable(cause: unknown): SluiceError {
    return new SluiceError("server_overloaded", "Keys cannot be checked right now. Retry shortly.", { retryAfterSeconds: 2, cause });
  }

  /** Forgets cached keys; for writes made through this process's own connection. */
  invalidate(): void {
    this.cache.clear();
  }

  /** Hands the pending last-used times to the writer. */
  flushLastUsed(): void {
    if (this.lastUsed.size === 0) return;
    const pending = [...this.lastUsed];
    this.lastUsed.clear();
    this.touchKeys(pending);
  }

  close(): void {
    clearInterval(this.flushTimer);
    this.flushLastUsed();
  }
}
