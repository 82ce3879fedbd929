// The order statistics every benchmark runner reports.

/** The value at `fraction` of the way through the sorted values (the upper one between two); NaN when there are none. */
export function quantile(values: number[], fraction: number): number {
  const sorted = [...values].sort((left, right) => left - right);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? Number.NaN;
}

/** The middle value (the upper of the two middle ones for an even count); NaN when there are none. */
export function median(values: number[]): number {
  return quantile(values, 0.5);
}

/** To one decimal place, as the runners report microseconds. */
export function round1(value: number): number {
  return Math.round(value * 10) / 10;
}

/** To three decimal places, as the runners report ratios. */
export function round3(value: number): number {
  return Math.round(value * 1000) / 1000;
}

/**
 * The median of each round's own `numerator[i] ÷ denominator[i]`, for measurements taken side by side in rounds: the
 * steadiest ratio when the machine's speed moves between rounds, since both sides of a round share its speed.
 */
export function pairedRatio(numerator: number[], denominator: number[]): number {
  return median(numerator.map((value, index) => value / (denominator[index] as number)));
}
