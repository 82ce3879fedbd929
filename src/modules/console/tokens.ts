import { SluiceError, invalidRequest } from "../../errors";
import { randomId, randomToken } from "../../ids";
import type { AccountRepository, ConsoleTokenInfo } from "../../storage/types";
import type { AuditActor, AuditLog } from "../audit/service";
import { hashKeySecret } from "../keys/secret";
import type { Actor } from "./accounts";

/** Every console token starts so: nobody mistakes one for an API key (`sk-sluice-`), and a secret scanner can find it. */
export const consoleTokenPrefix = "sluice-console-";
const shownLength = consoleTokenPrefix.length + 4;
/**
 * A token's last use is written at most this often by one instance: a script polling the console API several times a
 * second would otherwise write a row for each of its requests.
 */
const touchEveryMs = 60_000;

/** The account a token is made for. */
export interface TokenOwner {
  id: string;
  email: string;
  organizationId: string | null;
}

/**
 * Console access tokens: `Authorization: Bearer` on the console API for scripts and provisioning systems, each acting
 * as the account it belongs to (an operator's token can do what the operator can, a member's what the member can).
 * Random, stored as SHA-256 only, shown once, revocable; looked up in the database on every use, so a revocation holds
 * from the next request on every instance.
 */
export class ConsoleTokens {
  /** When this instance last wrote each token's last use. */
  private readonly touched = new Map<string, number>();

  constructor(
    private readonly repository: AccountRepository,
    private readonly audit: AuditLog,
  ) {}

  /** A new token for an account; its secret is in this answer and nowhere else, ever. */
  async create(
    input: { owner: TokenOwner; name: string; expiresInMs?: number; now?: number },
    actor: AuditActor,
  ): Promise<{ token: ConsoleTokenInfo; secret: string }> {
    const name = input.name.trim();
    if (!name || name.length > 100) throw invalidRequest("Give the token a name (at most 100 characters).", "name");
    const now = input.now ?? Date.now();
    const secret = consoleTokenPrefix + randomToken(32);
    const token = {
      id: randomId("tok_", 12),
      userId: input.owner.id,
      name,
      prefix: secret.slice(0, shownLength),
      createdAt: now,
      expiresAt: input.expiresInMs === undefined ? null : now + input.expiresInMs,
      revokedAt: null,
      lastUsedAt: null,
    };
    await this.repository.insertToken({ ...token, tokenHash: hashKeySecret(secret) });
    await this.audit.record(actor, "token.created", token.id, {
      organizationId: input.owner.organizationId,
      changes: { name: [null, name], account: [null, input.owner.email], expiresAt: [null, token.expiresAt] },
    });
    return { token: { ...token, email: input.owner.email }, secret };
  }

  /** Every account's tokens, or one account's; newest first. */
  list(userId?: string): Promise<ConsoleTokenInfo[]> {
    return this.repository.listTokens(userId);
  }

  find(id: string): Promise<ConsoleTokenInfo | undefined> {
    return this.repository.findToken(id);
  }

  /** Revokes a token from its next use on; revoking it again changes nothing and records nothing. */
  async revoke(token: ConsoleTokenInfo, actor: AuditActor, now = Date.now()): Promise<ConsoleTokenInfo> {
    if (token.revokedAt !== null) return token;
    await this.repository.revokeToken(token.id, now);
    await this.audit.record(actor, "token.revoked", token.id, { changes: { revokedAt: [null, now] } });
    return { ...token, revokedAt: now };
  }

  /** The account behind a token that is neither revoked nor expired, as the console's actor. */
  async actorOf(secret: string, now = Date.now()): Promise<Actor | undefined> {
    if (!secret.startsWith(consoleTokenPrefix)) return undefined;
    const user = await this.repository.tokenUser(hashKeySecret(secret), now);
    if (!user) return undefined;
    this.touch(user.tokenId, now);
    // No CSRF token: a bearer token is not sent by a browser on its own, so there is no cross-site request to stop.
    return { userId: user.userId, email: user.email, role: user.role, organizationId: user.organizationId, csrfToken: "", tokenName: user.tokenName };
  }

  /** Writes a token's last use unless this instance wrote it less than a minute ago; never fails the request. */
  private touch(tokenId: string, now: number): void {
    const last = this.touched.get(tokenId);
    if (last !== undefined && now - last < touchEveryMs) return;
    this.touched.set(tokenId, now);
    // Bounded: forgetting every entry costs at most one write per token in use.
    if (this.touched.size > 10_000) this.touched.clear();
    this.repository.touchToken(tokenId, now).catch(() => this.touched.delete(tokenId));
  }
}

/** The 404 of a token that does not exist or that the actor may not see. */
export function tokenNotFound(): SluiceError {
  return new SluiceError("not_found", "No such token.");
}
