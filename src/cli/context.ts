import { loadConfig } from "../config/load";
import type { Config } from "../config/schema";
import { AuditLog, cliActor, type AuditActor } from "../modules/audit/service";
import { AccountService } from "../modules/console/accounts";
import { KeyService } from "../modules/keys/service";
import { OrganizationService } from "../modules/organizations/service";
import { openBackends } from "../storage/open";
import type { RedisConnection } from "../storage/redis";
import type { Storage } from "../storage/types";

export interface CliContext {
  config: Config;
  storage: Storage;
  /** Shared mode only. */
  redis?: RedisConnection;
  organizations: OrganizationService;
  keys: KeyService;
  accounts: AccountService;
  audit: AuditLog;
  /** Who runs this command, for the audit trail. */
  actor: AuditActor;
  close(): Promise<void>;
}

/** Opens the configuration and the database (SQLite, or PostgreSQL + Redis) that every command reads. */
export async function openCliContext(): Promise<CliContext> {
  const config = loadConfig();
  const { storage, redis } = await openBackends();
  const audit = new AuditLog(storage.audit);
  return {
    config,
    storage,
    redis,
    organizations: new OrganizationService(storage.organizations, new Set(config.plans.map((plan) => plan.id)), audit, storage.changes),
    keys: new KeyService(storage.keys, audit, storage.changes),
    accounts: new AccountService(storage.accounts, audit),
    audit,
    actor: cliActor(),
    async close() {
      await storage.close();
      redis?.close();
    },
  };
}

/** Runs a command's body with an open context, and closes it afterwards whatever happens. */
export async function withCliContext<T>(body: (context: CliContext) => Promise<T>): Promise<T> {
  const context = await openCliContext();
  try {
    return await body(context);
  } finally {
    await context.close();
  }
}

export function formatTime(time: number | null): string {
  return time === null ? "-" : new Date(time).toISOString();
}
