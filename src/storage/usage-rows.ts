// Reading the usage aggregates back, the same for every backend.
import { bucketMs, fiveHoursMs } from "../usage-periods";
import type { OrganizationUsage } from "./types";

/** The first minute whose aggregate can still be inside the 5-hour window at `now`. */
export function usageWindowStart(now: number): number {
  return Math.floor((now - fiveHoursMs) / bucketMs);
}

/** Minute aggregates older than 6 hours are never read again. */
export function oldestNeededMinute(now: number): number {
  return Math.floor((now - fiveHoursMs - 3_600_000) / bucketMs);
}

/** Groups aggregate rows by organization. */
export function usageByOrganization(
  windowRows: { organizationId: string; tokens: number; lastTime: number }[],
  monthRows: { organizationId: string; tokens: number }[],
): Map<string, OrganizationUsage> {
  const usage = new Map<string, OrganizationUsage>();
  const entry = (id: string) => {
    let found = usage.get(id);
    if (!found) {
      found = { buckets: [], monthTokens: 0 };
      usage.set(id, found);
    }
    return found;
  };
  for (const row of windowRows) entry(row.organizationId).buckets.push({ tokens: Number(row.tokens), lastTime: Number(row.lastTime) });
  for (const row of monthRows) entry(row.organizationId).monthTokens = Number(row.tokens);
  return usage;
}
