import type { Database } from "bun:sqlite";
import type { PlanConfig } from "../../config/schema";
import type { DatabaseHandle } from "../../db/client";
import { SluiceError } from "../../errors";
import { hashesEqual, hashKeySecret, keyPrefix } from "../keys/secret";

/** Who is asking: the key, its organization and the organization's plan. */
export interface Caller {
  keyId: string;
  organizationId: string;
  organizationName: string;
  plan: PlanConfig;
}

interface KeyRecord {
  hash: string;
  keyId: string;
  organizationId: string;
  organizationName: string;
  organizationStatus: string;
  planId: string;
  expiresAt: number | null;
  revokedAt: number | null;
}

const maxCachedKeys = 100_000;

function invalidKey(): SluiceError {
  return new SluiceError("invalid_api_key", "Incorrect API key provided. Check the key, or create a new one in the console.");
}
const lastUsedFlushMs = 1000;

/**
 * Turns a bearer key into a Caller. Keys are looked up by SHA-256 hash, first in memory, then with one
 * indexed query; the cache is dropped whenever SQLite's data_version says another connection wrote (a CLI
 * revocation applies to the very next request). `last_used_at` is written in batches, once a second.
 */
export class AuthService {
  private readonly cache = new Map<string, KeyRecord>();
  private readonly lastUsed = new Map<string, number>();
  private readonly lookup;
  private readonly flushTimer: Timer;

  constructor(
    private readonly database: DatabaseHandle,
    private readonly plans: ReadonlyMap<string, PlanConfig>,
    /** Writes [key id, time] pairs of last use; off the request thread (the ledger's writer), as it is a write. */
    private readonly touchKeys: (entries: [string, number][]) => void,
  ) {
    const sqlite: Database = database.sqlite;
    this.lookup = sqlite.query<KeyRecord, [string]>(
      `SELECT k.hash AS hash, k.id AS keyId, o.id AS organizationId, o.name AS organizationName,
              o.status AS organizationStatus, o.plan AS planId, k.expires_at AS expiresAt, k.revoked_at AS revokedAt
         FROM api_keys k JOIN organizations o ON o.id = k.organization_id
        WHERE k.hash = ?`,
    );
    database.onExternalChange(() => this.cache.clear());
    this.flushTimer = setInterval(() => this.flushLastUsed(), lastUsedFlushMs);
    this.flushTimer.unref();
  }

  /** Throws missing_api_key, invalid_api_key or organization_inactive; returns the caller otherwise. */
  authenticate(bearer: string | undefined, now = Date.now()): Caller {
    if (!bearer) throw new SluiceError("missing_api_key", "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.");
    if (!bearer.startsWith(keyPrefix)) throw invalidKey();
    this.database.pollExternalChanges();
    const hash = hashKeySecret(bearer);
    const record = this.cache.get(hash) ?? this.load(hash);
    if (!record || !hashesEqual(record.hash, hash)) throw invalidKey();
    if (record.revokedAt !== null || (record.expiresAt !== null && record.expiresAt <= now)) throw invalidKey();
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
    this.lastUsed.set(record.keyId, now);
    return { keyId: record.keyId, organizationId: record.organizationId, organizationName: record.organizationName, plan };
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

  private load(hash: string): KeyRecord | undefined {
    const record = this.lookup.get(hash) ?? undefined;
    if (!record) return undefined;
    if (this.cache.size >= maxCachedKeys) this.cache.clear();
    this.cache.set(hash, record);
    return record;
  }
}
