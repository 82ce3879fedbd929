// Each organization's use of its plan's token quotas, and each capped key's use of its own caps, as Prometheus gauges,
// so that operators alert on them with the tools they already run
// (`sluice_organization_tokens / sluice_organization_token_limit > 0.8`) before members hit a 429. Read at each scrape
// from the admission store: what the next admission would count, on every instance alike.
import type { PlanConfig } from "../../config/schema";
import type { ChangeFeed, KeyRepository, LimitedKey, Organization, OrganizationRepository } from "../../storage/types";
import { keyLimitsOf } from "../auth/service";
import type { AdmissionStore, UsageSnapshot } from "../admission/store";
import type { Metrics } from "./metrics";
import type { Gauge } from "./prometheus";

export interface QuotaGaugeSources {
  organizations: OrganizationRepository;
  keys: KeyRepository;
  /** Raised by every change to organizations, keys and resets: the lists read at a scrape are kept until then. */
  changes: ChangeFeed;
  /** The plans in force (a reload refills the map). */
  plans: ReadonlyMap<string, PlanConfig>;
  admission: AdmissionStore;
  clock: () => number;
}

/** A gauge's labels, and its windows: [window, the quota or cap (undefined: none), tokens used]. */
interface Reading {
  labels: Record<string, string>;
  windows: [string, number | null | undefined, number][];
}

/**
 * Fills `sluice_organization_tokens` and `sluice_organization_token_limit` for the active organizations whose plan
 * has token quotas, and `sluice_key_tokens` and `sluice_key_token_limit` for their keys with token caps of their own
 * (neither revoked nor expired), at each scrape. The organizations and capped keys are read again only after a change:
 * a scrape every few seconds must not read every organization each time (a console open to sign-up may hold many
 * waitlisted ones), on SQLite on the server's thread.
 */
export function registerQuotaGauges(metrics: Metrics, sources: QuotaGaugeSources): void {
  const activeOrganizations = keptUntilChange(sources.changes, async () =>
    (await sources.organizations.list()).filter((organization) => organization.status === "active"),
  );
  const cappedKeys = keptUntilChange(sources.changes, async () =>
    (await sources.keys.limited()).filter((key) => key.tokensPer5h !== null || key.tokensPerMonth !== null),
  );
  metrics.onScrape(async () => {
    const now = sources.clock();
    const [organizations, keys] = await Promise.all([activeOrganizations(), cappedKeys()]);
    const byId = new Map(organizations.map((organization) => [organization.id, organization]));
    const [organizationReadings, keyReadings] = await Promise.all([
      Promise.all(organizations.map((organization) => organizationReading(sources, organization, now))),
      Promise.all(keys.map((key) => keyReading(sources, key, byId.get(key.organizationId), now))),
    ]);
    // Set only once every reading is in: a scrape never shows a half-filled set.
    show(metrics.organizationTokens, metrics.organizationTokenLimit, organizationReadings);
    show(metrics.keyTokens, metrics.keyTokenLimit, keyReadings);
  });
}

async function organizationReading(sources: QuotaGaugeSources, organization: Organization, now: number): Promise<Reading | undefined> {
  const plan = sources.plans.get(organization.plan);
  // An organization whose plan has no token quota has nothing to run out of.
  if (!plan || (plan.tokensPer5h === undefined && plan.tokensPerMonth === undefined)) return undefined;
  const snapshot = await sources.admission.snapshot(organization.id, plan, now);
  return {
    labels: { organization_id: organization.id, organization: organization.name },
    windows: windowsOf(plan.tokensPer5h, plan.tokensPerMonth, snapshot),
  };
}

async function keyReading(sources: QuotaGaugeSources, key: LimitedKey, organization: Organization | undefined, now: number): Promise<Reading | undefined> {
  const limits = keyLimitsOf(key);
  // A key of an organization that is not active, revoked or expired admits nothing.
  if (!organization || !limits || key.revokedAt !== null || (key.expiresAt !== null && key.expiresAt <= now)) return undefined;
  const snapshot = await sources.admission.keySnapshot(organization.id, { id: key.id, limits }, now);
  return {
    labels: { key_id: key.id, key: key.name, organization_id: organization.id, organization: organization.name },
    windows: windowsOf(key.tokensPer5h, key.tokensPerMonth, snapshot),
  };
}

function windowsOf(fiveHours: number | null | undefined, month: number | null | undefined, snapshot: UsageSnapshot): Reading["windows"] {
  return [
    ["5h", fiveHours, snapshot.fiveHours.used],
    ["month", month, snapshot.month.used],
  ];
}

function show(used: Gauge, limit: Gauge, readings: (Reading | undefined)[]): void {
  used.clear();
  limit.clear();
  for (const reading of readings) {
    if (!reading) continue;
    for (const [window, cap, tokens] of reading.windows) {
      if (cap === undefined || cap === null) continue;
      const labels = { ...reading.labels, window };
      used.set(labels, tokens);
      limit.set(labels, cap);
    }
  }
}

/** `read`'s answer, kept until the change feed says something changed (a failed read is tried again next time). */
function keptUntilChange<T>(changes: ChangeFeed, read: () => Promise<T>): () => Promise<T> {
  let kept: Promise<T> | undefined;
  changes.onChange(() => {
    kept = undefined;
  });
  return async () => {
    await changes.check();
    kept ??= read();
    try {
      return await kept;
    } catch (error) {
      kept = undefined;
      throw error;
    }
  };
}
