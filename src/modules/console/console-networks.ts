import { SluiceError } from "../../errors";
import type { ClientAddresses, RequestServer } from "../../http/client-address";
import { listHas, networkList } from "../keys/networks";

/**
 * `[console] networks`: the console (its pages, its API, sessions, console tokens and single sign-on alike) answers
 * only callers from these, as an admin interface kept to the office and the VPN. Returns the check the console's
 * routes run first; it looks the caller's address up (about a microsecond) only when networks are set, and builds
 * the lookup once per configuration.
 */
export function consoleNetworkCheck(networks: () => readonly string[] | undefined, addresses: ClientAddresses) {
  let built: { entries: readonly string[]; list: ReturnType<typeof networkList> } | undefined;
  return (request: Request, server: RequestServer): void => {
    const entries = networks();
    if (entries === undefined) return;
    if (built?.entries !== entries) built = { entries, list: networkList(entries) };
    const address = addresses.of(request, server);
    if (address === undefined || !listHas(built.list, address)) {
      throw new SluiceError(
        "forbidden",
        `This console answers only from its networks ([console] networks); ${address ?? "this caller's address"} is not among them.`,
      );
    }
  };
}
