import { userInfo } from "node:os";
import { timeOrderedId } from "../../ids";
import type { AuditActor, AuditEntry, AuditFilter, AuditRepository } from "../../storage/types";
import type { AuditAction } from "./entry";

export type { AuditActor };

export { auditActions, type AuditAction } from "./entry";

/** The actor of a command-line change: the operating-system user who ran it. */
export function cliActor(): AuditActor {
  let name = process.env.USER ?? "";
  try {
    name = userInfo().username || name;
  } catch {
    // A user without a passwd entry (some containers): the environment's name, if any.
  }
  return { kind: "cli", name: name || "unknown" };
}

/**
 * The audit trail: one entry per administrative change or sign-in, written by the service that makes the change,
 * so that the console and the CLI record it the same way. Callers pass what changed, never a secret.
 */
export class AuditLog {
  constructor(
    private readonly repository: AuditRepository,
    private readonly clock: () => number = Date.now,
  ) {}

  async record(
    actor: AuditActor,
    action: AuditAction,
    target: string,
    details: { organizationId?: string | null; changes?: Record<string, [unknown, unknown]> } = {},
  ): Promise<void> {
    await this.repository.insert({
      id: timeOrderedId("aud_"),
      at: this.clock(),
      actorKind: actor.kind,
      actor: actor.name,
      action,
      target,
      organizationId: details.organizationId ?? null,
      changes: details.changes ?? null,
      address: actor.address ?? null,
    });
  }

  list(filter: AuditFilter): Promise<AuditEntry[]> {
    return this.repository.list(filter);
  }
}

/** The fields whose values differ between `before` and `after`, as [old, new]; null when nothing changed. */
export function changedFields<T extends object>(before: T, after: T, fields: readonly (keyof T & string)[]): Record<string, [unknown, unknown]> | null {
  const changes: Record<string, [unknown, unknown]> = {};
  for (const field of fields) if (!Bun.deepEquals(before[field], after[field])) changes[field] = [before[field], after[field]];
  return Object.keys(changes).length > 0 ? changes : null;
}
