import { asc, eq } from "drizzle-orm";
import type { Drizzle } from "../../db/client";
import { apiKeys } from "../../db/schema";
import { randomId } from "../../ids";
import { generateKeySecret, hashKeySecret, shownPrefix } from "./secret";

export type ApiKey = typeof apiKeys.$inferSelect;
/** What may be shown about a key: everything but its hash. */
export type ApiKeyInfo = Omit<ApiKey, "hash">;

const shownColumns = {
  id: apiKeys.id,
  organizationId: apiKeys.organizationId,
  name: apiKeys.name,
  prefix: apiKeys.prefix,
  createdAt: apiKeys.createdAt,
  lastUsedAt: apiKeys.lastUsedAt,
  expiresAt: apiKeys.expiresAt,
  revokedAt: apiKeys.revokedAt,
};

export class KeyError extends Error {
  override name = "KeyError";
}

/** API keys: created with their secret shown once, listed without it, revoked. */
export class KeyService {
  constructor(private readonly db: Drizzle) {}

  create(input: { organizationId: string; name?: string; expiresInMs?: number; now?: number }): { key: ApiKeyInfo; secret: string } {
    const now = input.now ?? Date.now();
    const secret = generateKeySecret();
    const row: ApiKey = {
      id: randomId("key_", 12),
      organizationId: input.organizationId,
      name: input.name?.trim() || "default",
      prefix: shownPrefix(secret),
      hash: hashKeySecret(secret),
      createdAt: now,
      lastUsedAt: null,
      expiresAt: input.expiresInMs === undefined ? null : now + input.expiresInMs,
      revokedAt: null,
    };
    this.db.insert(apiKeys).values(row).run();
    const { hash: _hash, ...key } = row;
    return { key, secret };
  }

  listForOrganization(organizationId: string): ApiKeyInfo[] {
    return this.db
      .select(shownColumns)
      .from(apiKeys)
      .where(eq(apiKeys.organizationId, organizationId))
      .orderBy(asc(apiKeys.createdAt))
      .all();
  }

  find(keyId: string): ApiKeyInfo | undefined {
    return this.db.select(shownColumns).from(apiKeys).where(eq(apiKeys.id, keyId)).get();
  }

  /** Revokes a key; revoking twice keeps the first revocation time. */
  revoke(keyId: string, now = Date.now()): ApiKeyInfo {
    const existing = this.find(keyId);
    if (!existing) throw new KeyError(`no key with id "${keyId}"`);
    if (existing.revokedAt !== null) return existing;
    this.db.update(apiKeys).set({ revokedAt: now }).where(eq(apiKeys.id, keyId)).run();
    return { ...existing, revokedAt: now };
  }
}
