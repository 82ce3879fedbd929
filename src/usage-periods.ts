// The periods usage is counted in, shared by admission (which enforces quotas over them) and the ledger (which
// sums its rows per minute and per month for them).

/** The rolling window of the 5-hour quota. */
export const fiveHoursMs = 5 * 60 * 60 * 1000;

/** Usage is kept per minute: the window's buckets and the ledger's per-minute aggregates. */
export const bucketMs = 60_000;

/** The UTC calendar month of a time, as a comparable number (year × 12 + month). */
export function monthOf(time: number): number {
  const date = new Date(time);
  return date.getUTCFullYear() * 12 + date.getUTCMonth();
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
