// Each organization's use of its plan's token quotas as Prometheus gauges, so that operators alert on them with the
// tools they already run (`sluice_organization_tokens / sluice_organization_token_limit > 0.8`), before members hit
// a 429. Read at each scrape from the admission store: what the next admission would count, on every instance alike.
import type { PlanConfig } from "../../config/schema";
import type { ChangeFeed, Organization, OrganizationRepository } from "../../storage/types";
import type { AdmissionStore } from "../admission/store";
import type { Metrics } from "./metrics";

export interface QuotaGaugeSources {
  organizations: OrganizationRepository;
  /** Raised by every change to organizations (and keys, and resets): the list read at a scrape is kept until then. */
  changes: ChangeFeed;
  /** The plans in force (a reload refills the map). */
  plans: ReadonlyMap<string, PlanConfig>;
  admission: AdmissionStore;
  clock: () => number;
}

/**
 * Fills `sluice_organization_tokens` and `sluice_organization_token_limit` at each scrape, for the active
 * organizations. Their list is read again only after a change: a scrape every few seconds must not read every
 * organization each time (a console open to sign-up may hold many waitlisted ones), on SQLite on the server's thread.
 */
export function registerQuotaGauges(metrics: Metrics, sources: QuotaGaugeSources): void {
  let organizations: Promise<Organization[]> | undefined;
  sources.changes.onChange(() => {
    organizations = undefined;
  });
  const activeOrganizations = async (): Promise<Organization[]> => {
    await sources.changes.check();
    organizations ??= sources.organizations.list().then((all) => all.filter((organization) => organization.status === "active"));
    try {
      return await organizations;
    } catch (error) {
      organizations = undefined;
      throw error;
    }
  };
  metrics.onScrape(async () => {
    const now = sources.clock();
    const readings = await Promise.all(
      (await activeOrganizations()).map(async (organization) => {
        const plan = sources.plans.get(organization.plan);
        // An organization whose plan has no token quota has nothing to run out of.
        if (!plan || (plan.tokensPer5h === undefined && plan.tokensPerMonth === undefined)) return undefined;
        return { organization, plan, snapshot: await sources.admission.snapshot(organization.id, plan, now) };
      }),
    );
    // Cleared only once every reading is in: a scrape never shows a half-filled set.
    metrics.organizationTokens.clear();
    metrics.organizationTokenLimit.clear();
    for (const reading of readings) {
      if (!reading) continue;
      const { organization, plan, snapshot } = reading;
      const windows: [string, number | undefined, number][] = [
        ["5h", plan.tokensPer5h, snapshot.fiveHours.used],
        ["month", plan.tokensPerMonth, snapshot.month.used],
      ];
      for (const [window, limit, used] of windows) {
        if (limit === undefined) continue;
        const labels = { organization_id: organization.id, organization: organization.name, window };
        metrics.organizationTokens.set(labels, used);
        metrics.organizationTokenLimit.set(labels, limit);
      }
    }
  });
}
