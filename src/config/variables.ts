// Settings read from the process environment: `sluice serve`'s own (environment.ts) and tracing's OTEL_* variables
// (src/tracing/settings.ts), checked the same way.
import { ConfigError } from "./load";

export type Environment = Record<string, string | undefined>;

/** An empty value counts as unset, as a unit file's `SLUICE_PORT=` or a shell's unset `$PORT` would give. */
export function variable(environment: Environment, name: string): string | undefined {
  const value = environment[name]?.trim();
  return value ? value : undefined;
}

/** The first of the variables set (a specific one before a general one: OTEL's traces-only before its every-signal one). */
export function firstOf(environment: Environment, ...names: string[]): [string, string] | undefined {
  for (const name of names) {
    const value = variable(environment, name);
    if (value !== undefined) return [name, value];
  }
  return undefined;
}

/** `true` or `false` (also `1` or `0`, in any case); `fallback` when unset, a ConfigError naming the variable otherwise. */
export function yesOrNo(environment: Environment, name: string, fallback: boolean): boolean {
  const written = variable(environment, name);
  if (written === undefined) return fallback;
  const value = written.toLowerCase();
  if (value === "true" || value === "1") return true;
  if (value === "false" || value === "0") return false;
  throw new ConfigError(`${name} must be true or false, got "${written}"`);
}

/**
 * A whole number from `min` (0 unless given) to `max`, from the first of `names` that is set; `fallback` when none is.
 * Anything else is a ConfigError naming the variable and what it holds.
 */
export function wholeNumber(
  environment: Environment,
  names: string | readonly string[],
  fallback: number,
  range: { max: number; min?: number; what?: string },
): number {
  const found = firstOf(environment, ...(typeof names === "string" ? [names] : names));
  if (!found) return fallback;
  const [name, value] = found;
  const { max, min = 0, what = "a whole number" } = range;
  const number = /^\d{1,10}$/.test(value) ? Number(value) : Number.NaN;
  if (!(number >= min && number <= max)) throw new ConfigError(`${name} must be ${what} from ${min} to ${max}, got "${value}"`);
  return number;
}
