import { randomId } from "../../ids";
import type { ApiKey, ApiKeyInfo, ChangeFeed, KeyRepository } from "../../storage/types";
import { generateKeySecret, hashKeySecret, shownPrefix } from "./secret";

export type { ApiKey, ApiKeyInfo };

export class KeyError extends Error {
  override name = "KeyError";
}

/** API keys: created with their secret shown once, listed without it, revoked. */
export class KeyService {
  constructor(
    private readonly repository: KeyRepository,
    /** Told of every revocation, so that every instance refuses the key from its next request. */
    private readonly changes?: ChangeFeed,
  ) {}

  async create(input: { organizationId: string; name?: string; expiresInMs?: number; now?: number }): Promise<{ key: ApiKeyInfo; secret: string }> {
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
    await this.repository.insert(row);
    const { hash: _hash, ...key } = row;
    return { key, secret };
  }

  listForOrganization(organizationId: string): Promise<ApiKeyInfo[]> {
    return this.repository.listForOrganization(organizationId);
  }

  find(keyId: string): Promise<ApiKeyInfo | undefined> {
    return this.repository.find(keyId);
  }

  /** Revokes a key; revoking twice keeps the first revocation time. */
  async revoke(keyId: string, now = Date.now()): Promise<ApiKeyInfo> {
    const existing = await this.find(keyId);
    if (!existing) throw new KeyError(`no key with id "${keyId}"`);
    if (existing.revokedAt !== null) return existing;
    await this.repository.revoke(keyId, now);
    await this.changes?.announce();
    return { ...existing, revokedAt: now };
  }
}
