const unitMs = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** Parses `90s`, `30m`, `12h` or `30d` into milliseconds; undefined when the text is not such a duration. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+)([smhd])$/.exec(text.trim());
  if (!match) return undefined;
  const amount = Number(match[1]);
  if (amount <= 0) return undefined;
  return amount * unitMs[match[2] as keyof typeof unitMs];
}
