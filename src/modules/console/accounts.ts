import { and, eq, gt, lt } from "drizzle-orm";
import type { Drizzle } from "../../db/client";
import { sessions, users } from "../../db/schema";
import { SluiceError, invalidRequest } from "../../errors";
import { randomId } from "../../ids";
import { hashKeySecret } from "../keys/secret";

export type User = typeof users.$inferSelect;
export type Role = User["role"];

/** Who is asking, once their session is known. */
export interface Actor {
  userId: string;
  email: string;
  role: Role;
  organizationId: string | null;
  csrfToken: string;
}

const sessionLifetimeMs = 7 * 24 * 3_600_000;
const minimumPasswordLength = 10;
const failureWindowMs = 15 * 60_000;
const maxFailures = 5;
const maxTrackedEmails = 10_000;

function token(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

/** Console accounts and sessions: passwords with Bun.password (argon2id), sessions stored as hashes. */
export class AccountService {
  /** Failed sign-ins per email, to slow down guessing. */
  private readonly failures = new Map<string, { count: number; since: number }>();

  constructor(private readonly db: Drizzle) {}

  static checkEmail(email: unknown): string {
    if (typeof email !== "string" || !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email.trim()) || email.length > 254) throw invalidRequest("Enter a valid email address.", "email");
    return email.trim().toLowerCase();
  }

  static checkPassword(password: unknown): string {
    if (typeof password !== "string" || password.length < minimumPasswordLength || password.length > 1024) {
      throw invalidRequest(`The password must be at least ${minimumPasswordLength} characters long.`, "password");
    }
    return password;
  }

  async createUser(input: { email: string; password: string; role: Role; organizationId: string | null }): Promise<User> {
    const email = AccountService.checkEmail(input.email);
    const password = AccountService.checkPassword(input.password);
    if (this.db.select({ id: users.id }).from(users).where(eq(users.email, email)).get()) {
      throw invalidRequest("An account with this email already exists.", "email");
    }
    const user: User = { id: randomId("usr_", 12), email, passwordHash: await Bun.password.hash(password), role: input.role, organizationId: input.organizationId, createdAt: Date.now() };
    this.db.insert(users).values(user).run();
    return user;
  }

  findByEmail(email: string): User | undefined {
    return this.db.select().from(users).where(eq(users.email, email.trim().toLowerCase())).get();
  }

  /** Checks the password (slowly, on purpose) and opens a session; 401 on a mismatch, 429 after repeated ones. */
  async signIn(emailInput: unknown, passwordInput: unknown, now = Date.now()): Promise<{ token: string; actor: Actor }> {
    const email = typeof emailInput === "string" ? emailInput.trim().toLowerCase() : "";
    const failure = this.failures.get(email);
    if (failure && now - failure.since < failureWindowMs && failure.count >= maxFailures) {
      throw new SluiceError("rate_limit_exceeded", "Too many failed sign-ins for this account. Try again later.", { retryAfterSeconds: Math.ceil((failure.since + failureWindowMs - now) / 1000) });
    }
    const user = email ? this.findByEmail(email) : undefined;
    const password = typeof passwordInput === "string" ? passwordInput : "";
    // Verify against a real hash even for unknown emails, so that timing does not tell which emails exist.
    const valid = user ? await Bun.password.verify(password, user.passwordHash) : (await Bun.password.verify(password, await dummyHash()), false);
    if (!user || !valid) {
      const current = failure && now - failure.since < failureWindowMs ? failure : { count: 0, since: now };
      current.count++;
      // Guessing across many emails must not grow this map without end: past windows are dropped.
      if (this.failures.size > maxTrackedEmails) {
        for (const [key, entry] of this.failures) if (now - entry.since >= failureWindowMs) this.failures.delete(key);
      }
      this.failures.set(email, current);
      throw new SluiceError("invalid_api_key", "Wrong email or password.");
    }
    this.failures.delete(email);
    this.db.delete(sessions).where(lt(sessions.expiresAt, now)).run();
    const sessionToken = token();
    const csrfToken = token();
    this.db.insert(sessions).values({ tokenHash: hashKeySecret(sessionToken), userId: user.id, csrfToken, createdAt: now, expiresAt: now + sessionLifetimeMs }).run();
    return { token: sessionToken, actor: { userId: user.id, email: user.email, role: user.role, organizationId: user.organizationId, csrfToken } };
  }

  /** The actor behind a session token, if the session exists and has not expired. */
  actorOf(sessionToken: string | undefined, now = Date.now()): Actor | undefined {
    if (!sessionToken) return undefined;
    const row = this.db
      .select({ userId: users.id, email: users.email, role: users.role, organizationId: users.organizationId, csrfToken: sessions.csrfToken })
      .from(sessions)
      .innerJoin(users, eq(users.id, sessions.userId))
      .where(and(eq(sessions.tokenHash, hashKeySecret(sessionToken)), gt(sessions.expiresAt, now)))
      .get();
    return row ?? undefined;
  }

  signOut(sessionToken: string): void {
    this.db.delete(sessions).where(eq(sessions.tokenHash, hashKeySecret(sessionToken))).run();
  }
}

let dummy: Promise<string> | undefined;
/** A hash to verify against when the email is unknown; made on first use, not at start-up (it takes ~50 ms). */
function dummyHash(): Promise<string> {
  dummy ??= Bun.password.hash("not a real password, only for timing");
  return dummy;
}
