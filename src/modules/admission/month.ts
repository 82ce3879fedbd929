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
