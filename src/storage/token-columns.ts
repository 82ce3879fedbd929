// The console tokens' queries, written once for both dialects: Drizzle's operators are the same for SQLite and
// PostgreSQL, only the tables differ (as log-conditions.ts does for the request log).
import { and, eq, gt, isNull, lt, or, type AnyColumn, type SQL } from "drizzle-orm";

interface TokenColumns {
  id: AnyColumn;
  name: AnyColumn;
  tokenHash: AnyColumn;
  expiresAt: AnyColumn;
  revokedAt: AnyColumn;
  lastUsedAt: AnyColumn;
}

interface UserColumns {
  id: AnyColumn;
  email: AnyColumn;
  role: AnyColumn;
  organizationId: AnyColumn;
}

/** What `tokenUser` selects: the token's id and name, and its account. */
export function tokenUserSelection<Token extends TokenColumns, User extends UserColumns>(
  tokens: Token,
  users: User,
): {
  tokenId: Token["id"];
  tokenName: Token["name"];
  userId: User["id"];
  email: User["email"];
  role: User["role"];
  organizationId: User["organizationId"];
} {
  return { tokenId: tokens.id, tokenName: tokens.name, userId: users.id, email: users.email, role: users.role, organizationId: users.organizationId };
}

/** The token with this hash, if it is neither revoked nor expired at `now`. */
export function usableToken(tokens: TokenColumns, tokenHash: string, now: number): SQL | undefined {
  return and(eq(tokens.tokenHash, tokenHash), isNull(tokens.revokedAt), or(isNull(tokens.expiresAt), gt(tokens.expiresAt, now)));
}

/** The token `id` if its last use was before `at` (or it was never used): the row a use at `at` moves forward. */
export function usedBefore(tokens: TokenColumns, id: string, at: number): SQL | undefined {
  return and(eq(tokens.id, id), or(isNull(tokens.lastUsedAt), lt(tokens.lastUsedAt, at)));
}
