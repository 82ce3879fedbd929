import type { BlockList } from "node:net";
import type { Server } from "bun";
import { addressFamily, listHas } from "../modules/keys/networks";

/** What a handler may ask of the server a request came to: Bun's, or none (a request made in a test with `app.handle`). */
export type RequestServer = Pick<Server<unknown>, "requestIP"> | null | undefined;

/** Where a request came from, as far as Sluice can tell. */
export interface RequestOrigin {
  /** The caller's address; undefined when the request has no connection. */
  address: string | undefined;
  /**
   * It came with `X-Forwarded-For` from a peer that is not a trusted proxy: most likely a proxy nobody named, whose
   * address every caller behind it shares (or the header is the caller's own invention).
   */
  throughUnnamedProxy: boolean;
}

/** `::ffff:10.0.0.1`, as a dual-stack socket shows an IPv4 peer, written as the IPv4 address it is. */
function plainAddress(address: string): string {
  return address.startsWith("::ffff:") && addressFamily(address.slice(7)) === "ipv4" ? address.slice(7) : address;
}

/** Unnamed proxies remembered so that each is logged once; a caller inventing the header has one real address. */
const maxNoticedPeers = 1000;

/**
 * The addresses requests come from: their connection's peer, or, when that peer is one of the trusted proxies
 * (`SLUICE_TRUSTED_PROXIES`), the address that proxy says it forwarded for. Bun's `requestIP` costs about 1 µs, so
 * only requests that need an address ask (keys bound to networks, the console).
 */
export class ClientAddresses {
  private readonly noticed = new Set<string>();

  constructor(
    private readonly trustedProxies: BlockList | undefined,
    /** Told once for each peer that sends `X-Forwarded-For` without being a trusted proxy. */
    private readonly unnamedProxy: (peer: string) => void = () => {},
  ) {}

  /** The caller's address (see origin). */
  of(request: Request, server: RequestServer): string | undefined {
    return this.origin(request, server).address;
  }

  /**
   * Where a request came from. Behind trusted proxies, `X-Forwarded-For` is read from the right, past every trusted
   * proxy, to the first hop no trusted proxy vouches for; entries on the left of it are the caller's own word and
   * are never read, so a caller cannot choose its address by sending the header itself.
   */
  origin(request: Request, server: RequestServer): RequestOrigin {
    const peer = server?.requestIP(request)?.address;
    if (peer === undefined) return { address: undefined, throughUnnamedProxy: false };
    let address = plainAddress(peer);
    const forwarded = request.headers.get("x-forwarded-for");
    if (!this.trustedProxies || !listHas(this.trustedProxies, address)) {
      if (forwarded) this.notice(address);
      return { address, throughUnnamedProxy: Boolean(forwarded) };
    }
    if (!forwarded) return { address, throughUnnamedProxy: false };
    const hops = forwarded.split(",");
    for (let index = hops.length - 1; index >= 0; index--) {
      const hop = plainAddress(hops[index]?.trim() ?? "");
      // Text that is not an address (a port, an obfuscated name) ends the chain: the last proxy's word is what is known.
      if (addressFamily(hop) === undefined) break;
      address = hop;
      if (!listHas(this.trustedProxies, hop)) break;
    }
    return { address, throughUnnamedProxy: false };
  }

  private notice(peer: string): void {
    if (this.noticed.has(peer) || this.noticed.size >= maxNoticedPeers) return;
    this.noticed.add(peer);
    this.unnamedProxy(peer);
  }
}
