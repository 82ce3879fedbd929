// The `--networks` option of `sluice key` and `sluice org`, and how both print networks.

/** `--networks 10.0.0.0/8,203.0.113.7`: those addresses and ranges (the services check them); `any`: anywhere (null). */
export function networksOption(value: string | undefined): string[] | null | undefined {
  if (value === undefined) return undefined;
  return value === "any" ? null : value.split(",");
}

/** Networks as a column of the CLI's output: `any` for anywhere. */
export function describeNetworks(networks: string[] | null): string {
  return networks === null ? "any" : networks.join(",");
}
