import type { BlockList } from "node:net";

/**
 * node:net, loaded on first use rather than at start: it adds about 4,500 objects to the heap, which every collection
 * marks for as long as the process lives (measured: an A/B of whole answers about 1.5% slower with it loaded at start),
 * and most servers bind no key to networks and trust no proxy.
 */
let net: typeof import("node:net") | undefined;
function netModule(): typeof import("node:net") {
  net ??= require("node:net") as typeof import("node:net");
  return net;
}

/** As many as OpenAI's IP allowlist holds: a key used from more places than that is better left unbound. */
export const maxNetworks = 50;

/** A list of networks that cannot be used, said in words; the caller names where it came from. */
export class NetworkListError extends Error {
  override name = "NetworkListError";
}

/** The family `BlockList` names for an address; undefined for text that is not one. */
export function addressFamily(address: string): "ipv4" | "ipv6" | undefined {
  const version = netModule().isIP(address);
  return version === 4 ? "ipv4" : version === 6 ? "ipv6" : undefined;
}

interface Network {
  address: string;
  family: "ipv4" | "ipv6";
  /** Undefined for a single address. */
  prefix: number | undefined;
}

/** `203.0.113.7`, `10.0.0.0/8` or `2001:db8::/32` read; undefined for anything else. */
function parseNetwork(entry: string): Network | undefined {
  const slash = entry.indexOf("/");
  const address = slash === -1 ? entry : entry.slice(0, slash);
  const family = addressFamily(address);
  if (!family) return undefined;
  if (slash === -1) return { address, family, prefix: undefined };
  const prefixText = entry.slice(slash + 1);
  const prefix = Number(prefixText);
  if (!/^\d{1,3}$/.test(prefixText) || prefix > (family === "ipv4" ? 32 : 128)) return undefined;
  return { address, family, prefix };
}

/**
 * Networks as given (a key's, an organization's, the trusted proxies; null: anywhere), checked: each an IPv4 or IPv6
 * address or CIDR range, none twice, one to fifty of them. Throws a NetworkListError naming the first that is not one.
 */
export function checkNetworks(entries: readonly string[] | null): string[] | null {
  if (entries === null) return null;
  const networks = [...new Set(entries.map((entry) => entry.trim()))];
  if (networks.length === 0 || networks.includes("")) throw new NetworkListError("give at least one address or CIDR range, or none for anywhere");
  if (networks.length > maxNetworks) throw new NetworkListError(`at most ${maxNetworks} addresses or CIDR ranges, got ${networks.length}`);
  const wrong = networks.find((entry) => parseNetwork(entry) === undefined);
  if (wrong !== undefined) {
    throw new NetworkListError(`"${wrong}" is not an IP address or CIDR range (such as 203.0.113.7, 10.0.0.0/8 or 2001:db8::/32)`);
  }
  return networks;
}

/**
 * The networks as one list to look addresses up in (Node's BlockList, which Bun has: IPv4 addresses also match as
 * IPv4-mapped IPv6 ones). Entries that are not networks (a row written by hand) are left out, so they allow nothing.
 */
export function networkList(entries: readonly string[]): BlockList {
  const list = new (netModule().BlockList)();
  for (const entry of entries) {
    const network = parseNetwork(entry);
    if (!network) continue;
    if (network.prefix === undefined) list.addAddress(network.address, network.family);
    else list.addSubnet(network.address, network.prefix, network.family);
  }
  return list;
}

/** Whether an address is in a list; an address that cannot be read is in none. */
export function listHas(list: BlockList, address: string): boolean {
  const family = addressFamily(address);
  return family !== undefined && list.check(address, family);
}
