import { requestRate } from "../../config/schema";
import { randomId } from "../../ids";
import type { ApiKey, ApiKeyInfo, ChangeFeed, KeyLimits, KeyRepository } from "../../storage/types";
import { changedFields, type AuditActor, type AuditLog } from "../audit/service";
import type { KeyLists } from "../../storage/key-lists";
import { checkNetworks } from "./networks";
import { generateKeySecret, hashKeySecret, shownPrefix } from "./secret";

export type { ApiKeyInfo, KeyLimits };

export const noLimits: KeyLimits = { maxConcurrency: null, tokensPer5h: null, tokensPerMonth: null, requestsPerMinute: null };

/** The caps a key may have, in the order they are shown. */
export const capFields = ["maxConcurrency", "tokensPer5h", "tokensPerMonth", "requestsPerMinute"] as const;

/** The most requests a minute a key's cap may allow: a plan's bound. */
const maxRequestsPerMinute = requestRate.maximum as number;

/** The caps alone, from a key (or anything else that has them). */
export function capsOf(limits: KeyLimits): KeyLimits {
  return {
    maxConcurrency: limits.maxConcurrency,
    tokensPer5h: limits.tokensPer5h,
    tokensPerMonth: limits.tokensPerMonth,
    requestsPerMinute: limits.requestsPerMinute,
  };
}

/** Whether a key has any cap of its own. */
export function hasLimits(limits: KeyLimits): boolean {
  return limits.maxConcurrency !== null || limits.tokensPer5h !== null || limits.tokensPerMonth !== null || limits.requestsPerMinute !== null;
}

/** Checks caps: each a whole number from 1 up, or null for none; the name of the first wrong one otherwise. */
function checkLimits(limits: KeyLimits): { field: keyof KeyLimits; message: string } | undefined {
  for (const field of capFields) {
    const value = limits[field];
    if (value !== null && !(Number.isSafeInteger(value) && value >= 1)) return { field, message: `${field} must be a whole number of at least 1, or none` };
  }
  if (limits.requestsPerMinute !== null && limits.requestsPerMinute > maxRequestsPerMinute) {
    return { field: "requestsPerMinute", message: `requestsPerMinute must be at most ${maxRequestsPerMinute.toLocaleString("en-US")}, or none` };
  }
  return undefined;
}

export class KeyError extends Error {
  override name = "KeyError";
}

/**
 * A key's models as given (null: every model of its plan), checked against the configured model ids: each known,
 * none twice, at least one. Aliases are not ids: a key names the model itself, which every alias of it reaches.
 */
export function checkKeyModels(models: readonly string[] | null, known: Iterable<string>): string[] | null {
  if (models === null) return null;
  const ids = [...new Set(models.map((id) => id.trim()))];
  if (ids.length === 0 || ids.includes("")) throw new KeyError("give at least one model id, or none for every model of the plan");
  const configured = new Set(known);
  const unknown = ids.filter((id) => !configured.has(id));
  if (unknown.length > 0) {
    const names = unknown.map((id) => `"${id}"`).join(", ");
    throw new KeyError(
      `unknown model${unknown.length === 1 ? "" : "s"} ${names}: expected ${configured.size === 0 ? "none" : `one of ${[...configured].join(", ")}`}`,
    );
  }
  return ids;
}

/** API keys: created with their secret shown once, listed without it, revoked. */
export class KeyService {
  constructor(
    private readonly repository: KeyRepository,
    private readonly audit: AuditLog,
    /** Told of every revocation, so that every instance refuses the key from its next request. */
    private readonly changes?: ChangeFeed,
  ) {}

  async create(
    input: {
      organizationId: string;
      name?: string;
      expiresInMs?: number;
      limits?: KeyLimits;
      models?: string[] | null;
      /** Checked here (checkNetworks): unlike models, they need no configuration to check. */
      networks?: string[] | null;
      now?: number;
      /** The key this one replaces (see rotate), for the audit trail. */
      rotatedFrom?: string;
    },
    actor: AuditActor,
  ): Promise<{ key: ApiKeyInfo; secret: string }> {
    const now = input.now ?? Date.now();
    const limits = input.limits ?? noLimits;
    const wrong = checkLimits(limits);
    if (wrong) throw new KeyError(wrong.message);
    const networks = checkNetworks(input.networks ?? null);
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
      ...limits,
      models: input.models ?? null,
      networks,
    };
    await this.repository.insert(row);
    const { hash: _hash, ...key } = row;
    await this.audit.record(actor, "key.created", key.id, {
      organizationId: key.organizationId,
      changes: {
        name: [null, key.name],
        prefix: [null, key.prefix],
        expiresAt: [null, key.expiresAt],
        ...(hasLimits(limits) ? Object.fromEntries(capFields.map((field) => [field, [null, limits[field]]])) : {}),
        ...(row.models === null ? {} : { models: [null, row.models] }),
        ...(networks === null ? {} : { networks: [null, networks] }),
        ...(input.rotatedFrom === undefined ? {} : { rotatedFrom: [null, input.rotatedFrom] }),
      },
    });
    return { key, secret };
  }

  /**
   * Replaces a key without a failed request: a new key with the same organization, label, caps and models (and, when
   * the old one expires, the same lifetime unless `expiresInMs` says otherwise), while the old one keeps working for
   * `graceMs` more (0: revoked at once). The new key's own caps count from zero: it is another key.
   */
  async rotate(
    keyId: string,
    input: { graceMs: number; expiresInMs?: number; now?: number },
    actor: AuditActor,
  ): Promise<{ key: ApiKeyInfo; secret: string; previous: ApiKeyInfo }> {
    const now = input.now ?? Date.now();
    const existing = await this.find(keyId);
    if (!existing) throw new KeyError(`no key with id "${keyId}"`);
    if (existing.revokedAt !== null || (existing.expiresAt !== null && existing.expiresAt <= now)) {
      throw new KeyError(`key "${keyId}" is ${existing.revokedAt !== null ? "revoked" : "expired"}: create a new key instead`);
    }
    const created = await this.create(
      {
        organizationId: existing.organizationId,
        name: existing.name,
        expiresInMs: input.expiresInMs ?? (existing.expiresAt === null ? undefined : existing.expiresAt - existing.createdAt),
        limits: capsOf(existing),
        models: existing.models,
        networks: existing.networks,
        now,
        rotatedFrom: keyId,
      },
      actor,
    );
    if (input.graceMs === 0) return { ...created, previous: await this.revoke(keyId, actor, now) };
    // A key that expires before the grace ends keeps its own expiry.
    const expiresAt = existing.expiresAt === null ? now + input.graceMs : Math.min(existing.expiresAt, now + input.graceMs);
    if (expiresAt !== existing.expiresAt) {
      await this.repository.setExpiry(keyId, expiresAt);
      await this.changes?.announce();
      await this.audit.record(actor, "key.updated", keyId, {
        organizationId: existing.organizationId,
        changes: { expiresAt: [existing.expiresAt, expiresAt], rotatedTo: [null, created.key.id] },
      });
    }
    return { ...created, previous: { ...existing, expiresAt } };
  }

  listForOrganization(organizationId: string): Promise<ApiKeyInfo[]> {
    return this.repository.listForOrganization(organizationId);
  }

  find(keyId: string): Promise<ApiKeyInfo | undefined> {
    return this.repository.find(keyId);
  }

  /** Changes a key's caps (null removes one); every instance applies them from its next request. */
  async setLimits(keyId: string, limits: KeyLimits, actor: AuditActor): Promise<ApiKeyInfo> {
    const existing = await this.find(keyId);
    if (!existing) throw new KeyError(`no key with id "${keyId}"`);
    const wrong = checkLimits(limits);
    if (wrong) throw new KeyError(wrong.message);
    const updated = { ...existing, ...capsOf(limits) };
    const changed = changedFields(existing, updated, capFields);
    if (!changed) return updated;
    await this.repository.setLimits(keyId, limits);
    await this.changes?.announce();
    await this.audit.record(actor, "key.updated", keyId, { organizationId: existing.organizationId, changes: changed });
    return updated;
  }

  /**
   * Changes the models a key may call (check them with checkKeyModels first) and the networks it may be used from,
   * those given (null: every model of its plan; anywhere; undefined: as they are); every instance applies them from
   * its next request.
   */
  async setLists(keyId: string, lists: Partial<KeyLists>, actor: AuditActor): Promise<ApiKeyInfo> {
    const existing = await this.find(keyId);
    if (!existing) throw new KeyError(`no key with id "${keyId}"`);
    const updated: ApiKeyInfo = {
      ...existing,
      models: lists.models === undefined ? existing.models : lists.models,
      networks: lists.networks === undefined ? existing.networks : checkNetworks(lists.networks),
    };
    const changed = changedFields(existing, updated, ["models", "networks"]);
    if (!changed) return existing;
    await this.repository.setLists(keyId, { models: updated.models, networks: updated.networks });
    await this.changes?.announce();
    await this.audit.record(actor, "key.updated", keyId, { organizationId: existing.organizationId, changes: changed });
    return updated;
  }

  /** Revokes a key; revoking twice keeps the first revocation time. */
  async revoke(keyId: string, actor: AuditActor, now = Date.now()): Promise<ApiKeyInfo> {
    const existing = await this.find(keyId);
    if (!existing) throw new KeyError(`no key with id "${keyId}"`);
    if (existing.revokedAt !== null) return existing;
    await this.repository.revoke(keyId, now);
    await this.changes?.announce();
    await this.audit.record(actor, "key.revoked", keyId, {
      organizationId: existing.organizationId,
      changes: { name: [existing.name, existing.name], revokedAt: [null, now] },
    });
    return { ...existing, revokedAt: now };
  }
}
