import { randomId } from "../../ids";
import type { ApiKey, ApiKeyInfo, ChangeFeed, KeyRepository } from "../../storage/types";
import type { AuditActor, AuditLog } from "../audit/service";
import { generateKeySecret, hashKeySecret, shownPrefix } from "./secret";

export type { ApiKey, ApiKeyInfo };

export class KeyError extends Error {
  override name = "KeyError";
}

/** API keys: created with their secret shown once, listed without it, revoked. */
export class KeyService {
  constructor(
    private readonly repository: KeyRepository,
    private readonly audit: AuditLog,
    /** Told of every revocation, so that every instance refuses the key from its next request. */
    private readonly changes?: ChangeFeed,
  ) {}

  async create(input: { organizationId: string; name?: string; expiresInMs?: number; now?: number }, actor: AuditActor): Promise<{ key: ApiKeyInfo; secret: string }> {
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
    await this.audit.record(actor, "key.created", key.id, {
      organizationId: key.organizationId,
      changes: { name: [null, key.name], prefix: [null, key.prefix], expiresAt: [null, key.expiresAt] },
    });
    return { key, secret };
  }

  listForOrganization(organizationId: string): Promise<ApiKeyInfo[]> {
    return this.repository.listForOrganization(organizationId);
  }

  find(keyId: string): Promise<ApiKeyInfo | undefined> {
    return this.repository.find(keyId);
  }

  /** Revokes a key; revoking twice keeps the first revocation time. */
  async revoke(keyId: string, actor: AuditActor, now = Date.now()): Promise<ApiKeyInfo> {
    const existing = await this.find(keyId);
    if (!existing) throw new KeyError(`no key with id "${keyId}"`);
    if (existing.revokedAt !== null) return existing;
    await this.repository.revoke(keyId, now);
    await this.changes?.announce();
    await this.audit.record(actor, "key.revoked", keyId, { organizationId: existing.organizationId, changes: { name: [existing.name, existing.name], revokedAt: [null, now] } });
    return { ...existing, revokedAt: now };
  }
}
