import { loadConfig } from "../config/load";
import type { Config } from "../config/schema";
import { openDatabase, type DatabaseHandle } from "../db/client";
import { KeyService } from "../modules/keys/service";
import { OrganizationService } from "../modules/organizations/service";

export interface CliContext {
  config: Config;
  database: DatabaseHandle;
  organizations: OrganizationService;
  keys: KeyService;
}

/** Opens the configuration and the database that every command reads. */
export function openCliContext(): CliContext {
  const config = loadConfig();
  const database = openDatabase();
  return {
    config,
    database,
    organizations: new OrganizationService(database.db, new Set(config.plans.map((plan) => plan.id))),
    keys: new KeyService(database.db),
  };
}

export function formatTime(time: number | null): string {
  return time === null ? "-" : new Date(time).toISOString();
}
