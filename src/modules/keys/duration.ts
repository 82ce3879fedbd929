const unitMs = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** Parses `90s`, `30m`, `12h` or `30d` into milliseconds; undefined when the text is not such a duration. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+)([smhd])$/.exec(text.trim());
  if (!match) return undefined;
  const amount = Number(match[1]);
  if (amount <= 0) return undefined;
  return amount * unitMs[match[2] as keyof typeof unitMs];
}

/** A grace period: `now` (none), or a duration as parseDuration reads it. */
export function parseGrace(text: string): number | undefined {
  return text.trim() === "now" ? 0 : parseDuration(text);
}

/** What parseTimeBound takes, for the message that refuses anything else. */
export const timeBoundForms = "a time back from now (24h, 7d), an ISO 8601 time, or milliseconds since the epoch";

/**
 * A point in time as people write it in a filter: a duration back from now (`24h`, `7d`), an ISO 8601 time, or
 * milliseconds since the epoch; undefined when it is none of these.
 */
export function parseTimeBound(text: string, now: number): number | undefined {
  const ago = parseDuration(text);
  if (ago !== undefined) return now - ago;
  if (/^\d{10,}$/.test(text)) return Number(text);
  const parsed = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : Number.NaN;
  return Number.isNaN(parsed) ? undefined : parsed;
}
