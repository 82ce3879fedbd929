import { SluiceError, invalidRequest } from "../../errors";
import { randomId, randomToken } from "../../ids";
import type { AccountRepository, Role, User } from "../../storage/types";
import type { AuditActor, AuditLog } from "../audit/service";
import { hashKeySecret } from "../keys/secret";
import { ConsoleTokens } from "./tokens";

/** Who is asking, once their session (or console token) is known. */
export interface Actor {
  userId: string;
  email: string;
  role: Role;
  organizationId: string | null;
  csrfToken: string;
  /** Set when the request came with a console token rather than a session: the token's name. */
  tokenName?: string;
  /** The address the request came from, for the audit trail (see ClientAddresses). */
  address?: string;
}

const sessionLifetimeMs = 7 * 24 * 3_600_000;
const minimumPasswordLength = 10;
const failureWindowMs = 15 * 60_000;
const maxFailures = 5;
/** Failed sign-ins from one address in the window, whatever the emails: a password tried against many accounts. */
const maxAddressFailures = 20;

/**
 * The key an address's failures are counted under, beside the emails': an email is trimmed before it is counted, so
 * no email typed into the form starts with a space, and no caller can spend another address's allowance.
 */
function addressKey(address: string): string {
  return ` ${address}`;
}

/**
 * Console accounts and sessions: passwords with Bun.password (argon2id), sessions stored as hashes in the database
 * (so a session opened through one instance works on every instance), failed sign-ins counted there too.
 */
export class AccountService {
  /** The accounts' console tokens, in the same database. */
  readonly tokens: ConsoleTokens;

  constructor(
    private readonly repository: AccountRepository,
    private readonly audit: AuditLog,
  ) {
    this.tokens = new ConsoleTokens(repository, audit);
  }

  static checkEmail(email: unknown): string {
    if (typeof email !== "string" || !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email.trim()) || email.length > 254)
      throw invalidRequest("Enter a valid email address.", "email");
    return email.trim().toLowerCase();
  }

  static checkPassword(password: unknown): string {
    if (typeof password !== "string" || password.length < minimumPasswordLength || password.length > 1024) {
      throw invalidRequest(`The password must be at least ${minimumPasswordLength} characters long.`, "password");
    }
    return password;
  }

  /** Checks a new account's email and password, and that the email is free; returns the email as stored. */
  async checkNewAccount(emailInput: string, password: string): Promise<string> {
    const email = AccountService.checkEmail(emailInput);
    AccountService.checkPassword(password);
    if (await this.repository.findUserByEmail(email)) throw invalidRequest("An account with this email already exists.", "email");
    return email;
  }

  async createUser(input: { email: string; password: string; role: Role; organizationId: string | null }, actor: AuditActor): Promise<User> {
    const email = await this.checkNewAccount(input.email, input.password);
    const password = input.password;
    const user: User = {
      id: randomId("usr_", 12),
      email,
      passwordHash: await Bun.password.hash(password),
      role: input.role,
      organizationId: input.organizationId,
      createdAt: Date.now(),
    };
    await this.repository.insertUser(user);
    await this.audit.record(actor, "account.created", user.email, { organizationId: user.organizationId, changes: { role: [null, user.role] } });
    return user;
  }

  findByEmail(email: string): Promise<User | undefined> {
    return this.repository.findUserByEmail(email.trim().toLowerCase());
  }

  /**
   * Checks the password (slowly, on purpose) and opens a session; 401 on a mismatch, 429 after repeated ones for the
   * account (5 in 15 minutes) or from the address `counted` (20, whatever the accounts). `address` is for the audit
   * trail; `counted` is the same address when it is the caller's own, not a proxy's that Sluice was not told of.
   */
  async signIn(
    emailInput: string,
    password: string,
    from: { address?: string; counted?: string } = {},
    now = Date.now(),
  ): Promise<{ token: string; actor: Actor }> {
    const email = emailInput.trim().toLowerCase();
    const attempt: AuditActor = { kind: "console", name: email, address: from.address };
    const counted = from.counted;
    const fromAddress = counted === undefined ? undefined : await this.repository.failures(addressKey(counted));
    if (fromAddress && now - fromAddress.since < failureWindowMs && fromAddress.count >= maxAddressFailures) {
      await this.audit.record(attempt, "signin.failed", email, { changes: { reason: [null, "too many failed attempts from this address"] } });
      throw new SluiceError("too_many_sign_in_attempts", "Too many failed sign-ins from this address. Try again later.", {
        retryAfterSeconds: Math.ceil((fromAddress.since + failureWindowMs - now) / 1000),
      });
    }
    const failure = await this.repository.failures(email);
    if (failure && now - failure.since < failureWindowMs && failure.count >= maxFailures) {
      await this.audit.record(attempt, "signin.failed", email, { changes: { reason: [null, "too many failed attempts"] } });
      throw new SluiceError("too_many_sign_in_attempts", "Too many failed sign-ins for this account. Try again later.", {
        retryAfterSeconds: Math.ceil((failure.since + failureWindowMs - now) / 1000),
      });
    }
    const user = email ? await this.findByEmail(email) : undefined;
    // Verify against a real hash even for unknown emails, so that timing does not tell which emails exist.
    let valid = false;
    if (user) valid = await Bun.password.verify(password, user.passwordHash);
    else await Bun.password.verify(password, await dummyHash());
    if (!user || !valid) {
      await this.repository.addFailure(email, now, now - failureWindowMs);
      // Not cleared by a success: one account's right password must not reset what was tried against the others.
      if (counted !== undefined) await this.repository.addFailure(addressKey(counted), now, now - failureWindowMs);
      await this.audit.record(attempt, "signin.failed", email, { changes: { reason: [null, "wrong email or password"] } });
      throw new SluiceError("wrong_credentials", "Wrong email or password.");
    }
    if (failure) await this.repository.clearFailures(email);
    await this.audit.record(attempt, "signin.succeeded", email, { organizationId: user.organizationId });
    return await this.openSession(user, now);
  }

  /**
   * Opens a session for the account of an email the company's identity provider vouched for (single sign-on, see
   * sso.ts); 401 when no account has it: an operator makes accounts, as where sign-up is closed.
   */
  async signInVerified(verifiedEmail: string, from: { address?: string } = {}, now = Date.now()): Promise<{ token: string; actor: Actor }> {
    const email = verifiedEmail.trim().toLowerCase();
    const attempt: AuditActor = { kind: "console", name: email, address: from.address };
    const user = await this.findByEmail(email);
    if (!user) {
      await this.audit.record(attempt, "signin.failed", email, { changes: { method: [null, "sso"], reason: [null, "no console account for this email"] } });
      throw new SluiceError("not_signed_in", `No console account for ${email}: ask an operator for one (sluice member create).`);
    }
    await this.audit.record(attempt, "signin.succeeded", email, { organizationId: user.organizationId, changes: { method: [null, "sso"] } });
    return await this.openSession(user, now);
  }

  /** Records a single sign-on that the identity provider's answer did not let through (see sso.ts), with the reason. */
  async ssoRefused(reason: string, address?: string): Promise<void> {
    const attempt: AuditActor = { kind: "console", name: "single sign-on", address };
    await this.audit.record(attempt, "signin.failed", "single sign-on", { changes: { method: [null, "sso"], reason: [null, reason] } });
  }

  private async openSession(user: User, now: number): Promise<{ token: string; actor: Actor }> {
    const sessionToken = randomToken(32);
    const csrfToken = randomToken(32);
    await this.repository.openSession(
      { tokenHash: hashKeySecret(sessionToken), userId: user.id, csrfToken, createdAt: now, expiresAt: now + sessionLifetimeMs },
      now,
    );
    return { token: sessionToken, actor: { userId: user.id, email: user.email, role: user.role, organizationId: user.organizationId, csrfToken } };
  }

  /** The actor behind a session token, if the session exists and has not expired. */
  async actorOf(sessionToken: string | undefined, now = Date.now()): Promise<Actor | undefined> {
    if (!sessionToken) return undefined;
    return await this.repository.sessionUser(hashKeySecret(sessionToken), now);
  }

  async signOut(sessionToken: string): Promise<void> {
    await this.repository.closeSession(hashKeySecret(sessionToken));
  }
}

let dummy: Promise<string> | undefined;
/** A hash to verify against when the email is unknown; made on first use, not at start-up (it takes ~50 ms). */
function dummyHash(): Promise<string> {
  dummy ??= Bun.password.hash("not a real password, only for timing");
  return dummy;
}
