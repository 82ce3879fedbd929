// The periods usage is counted in, shared by admission (which enforces quotas over them) and the ledger (which
// sums its rows per minute, per hour and per month for them).

/** The rolling window of the 5-hour quota. */
export const fiveHoursMs = 5 * 60 * 60 * 1000;

/** Usage is kept per minute: the window's buckets and the ledger's per-minute aggregates. */
export const bucketMs = 60_000;

/** The ledger's per-hour aggregates by key and model (usage_hours): the console's charts, a capped key's month. */
export const hourMs = 3_600_000;

/** The last month monthOf computed and its bounds: nearly every call on the request path falls in it. */
let known = { month: 0, start: 0, end: 0 };

/** The UTC calendar month of a time, as a comparable number (year × 12 + month). */
export function monthOf(time: number): number {
  if (time >= known.start && time < known.end) return known.month;
  const date = new Date(time);
  const year = date.getUTCFullYear();
  const monthIndex = date.getUTCMonth();
  known = { month: year * 12 + monthIndex, start: Date.UTC(year, monthIndex, 1), end: Date.UTC(year, monthIndex + 1, 1) };
  return known.month;
}

/** 00:00 UTC on the 1st of the month that contains `time`. */
export function startOfMonth(time: number): number {
  const date = new Date(time);
  return Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1);
}

/** 00:00 UTC on the 1st of the month after the one that contains `time`. */
export function startOfNextMonth(time: number): number {
  const date = new Date(time);
  return Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1);
}
