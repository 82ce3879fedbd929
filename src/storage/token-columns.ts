// The console tokens' queries, written once for both dialects: Drizzle's operators are the same for SQLite and
// PostgreSQL, only the tables differ (as log-conditions.ts does for the request log).
import { and, eq, gt, isNull, or, type AnyColumn, type SQL } from "drizzle-orm";

interface TokenColumns {
  name: AnyColumn;
  tokenHash: AnyColumn;
  expiresAt: AnyColumn;
  revokedAt: AnyColumn;
}

interface UserColumns {
  id: AnyColumn;
  email: AnyColumn;
  role: AnyColumn;
  organizationId: AnyColumn;
}

/** What `tokenUser` selects: the token's name and its account. */
export function tokenUserSelection<Token extends TokenColumns, User extends UserColumns>(
  tokens: Token,
  users: User,
): { tokenName: Token["name"]; userId: User["id"]; email: User["email"]; role: User["role"]; organizationId: User["organizationId"] } {
  return { tokenName: tokens.name, userId: users.id, email: users.email, role: users.role, organizationId: users.organizationId };
}

/** The token with this hash, if it is neither revoked nor expired at `now`. */
export function usableToken(tokens: TokenColumns, tokenHash: string, now: number): SQL | undefined {
  return and(eq(tokens.tokenHash, tokenHash), isNull(tokens.revokedAt), or(isNull(tokens.expiresAt), gt(tokens.expiresAt, now)));
}
