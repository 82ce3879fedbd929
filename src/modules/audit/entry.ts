// What the audit trail records, without imports: the server, the console's pages and the tests share it.

export const auditActions = [
  "organization.created",
  "organization.updated",
  "key.created",
  "key.updated",
  "key.revoked",
  "usage.reset",
  "account.created",
  "signin.succeeded",
  "signin.failed",
  "config.reloaded",
  "token.created",
  "token.revoked",
  "ledger.pruned",
] as const;

export type AuditAction = (typeof auditActions)[number];

/**
 * Who made an administrative change: a console account (its email), a console account through one of its tokens
 * (its email and the token's name), the CLI (the operating-system user), or the server itself on a signal (its name:
 * a configuration reloaded on SIGHUP).
 */
export interface AuditActor {
  kind: "console" | "token" | "cli" | "server";
  name: string;
  /** The address a console change or sign-in came from; none for the CLI and the server. */
  address?: string;
}

/** One administrative change or sign-in. `changes` maps a field to [old, new] (old null for what was created). */
export interface AuditEntry {
  id: string;
  at: number;
  actorKind: AuditActor["kind"];
  actor: string;
  action: string;
  target: string;
  organizationId: string | null;
  changes: Record<string, [unknown, unknown]> | null;
  /** The actor's address (console changes and sign-ins), null otherwise. */
  address: string | null;
}
