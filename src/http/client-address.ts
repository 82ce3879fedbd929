import type { BlockList } from "node:net";
import type { Server } from "bun";
import { addressFamily, listHas } from "../modules/keys/networks";

/** What a handler may ask of the server a request came to: Bun's, or none (a request made in a test with `app.handle`). */
export type RequestServer = Pick<Server<unknown>, "requestIP"> | null | undefined;

/** `::ffff:10.0.0.1`, as a dual-stack socket shows an IPv4 peer, written as the IPv4 address it is. */
function plainAddress(address: string): string {
  return address.startsWith("::ffff:") && addressFamily(address.slice(7)) === "ipv4" ? address.slice(7) : address;
}

/**
 * The address a request came from: its connection's peer, or, when that peer is one of the trusted proxies
 * (`SLUICE_TRUSTED_PROXIES`), the address that proxy says it forwarded for: `X-Forwarded-For` read from the right,
 * past every trusted proxy, as the first hop no trusted proxy vouches for. Entries on the left of that one are the
 * caller's own word and are never read, so a caller cannot choose its address by sending the header itself.
 * Undefined when the request has no connection. Bun's `requestIP` costs about 1 µs, so this is asked only of
 * requests that need it.
 */
export function clientAddress(request: Request, server: RequestServer, trustedProxies: BlockList | undefined): string | undefined {
  const peer = server?.requestIP(request)?.address;
  if (peer === undefined) return undefined;
  let address = plainAddress(peer);
  if (!trustedProxies || !listHas(trustedProxies, address)) return address;
  const forwarded = request.headers.get("x-forwarded-for");
  if (!forwarded) return address;
  const hops = forwarded.split(",");
  for (let index = hops.length - 1; index >= 0; index--) {
    const hop = plainAddress(hops[index]?.trim() ?? "");
    // Text that is not an address (a port, an obfuscated name) ends the chain: the last proxy's word is what is known.
    if (addressFamily(hop) === undefined) return address;
    address = hop;
    if (!listHas(trustedProxies, hop)) return hop;
  }
  return address;
}

/**
 * Whether a request came through a proxy Sluice does not trust: it carries `X-Forwarded-For` but its peer is not one
 * of the trusted proxies. Its address is then likely the proxy's, shared by every caller behind it (or the header is
 * the caller's own invention): not an address to hold one caller's failures against.
 */
export function forwardedByStranger(request: Request, server: RequestServer, trustedProxies: BlockList | undefined): boolean {
  if (!request.headers.has("x-forwarded-for")) return false;
  const peer = server?.requestIP(request)?.address;
  return peer === undefined || !trustedProxies || !listHas(trustedProxies, plainAddress(peer));
}
