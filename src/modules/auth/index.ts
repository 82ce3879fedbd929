import { Elysia } from "elysia";
import { SluiceError } from "../../errors";
import type { RequestServer } from "../../http/client-address";
import { listHas } from "../keys/networks";
import { recordOf } from "../observability/request-record";
import type { AuthService, Caller } from "./service";

/** The key of `Authorization: Bearer KEY`; only that header (never a query parameter, which lands in access logs). */
export function bearerKey(request: Request): string | undefined {
  const authorization = request.headers.get("authorization");
  return authorization?.startsWith("Bearer ") ? authorization.slice(7).trim() : undefined;
}

/**
 * The caller of a request, noted in its record (for the log line and metrics); throws 401/403 as SluiceErrors. The
 * key is the bearer token unless the API reads it from a header of its own (Anthropic's `x-api-key`). A key bound to
 * networks, its own or its organization's, is refused (401 ip_not_authorized) from any other address.
 */
export function authenticateRequest(auth: AuthService, request: Request, server: RequestServer, key = bearerKey(request)): Caller | Promise<Caller> {
  const caller = auth.authenticate(key);
  return caller instanceof Promise ? caller.then((found) => admitted(auth, request, server, found)) : admitted(auth, request, server, caller);
}

function admitted(auth: AuthService, request: Request, server: RequestServer, caller: Caller): Caller {
  const record = recordOf(request);
  if (record) {
    record.organizationId = caller.organizationId;
    record.keyId = caller.keyId;
  }
  const networks = caller.networks;
  if (networks) {
    // Already noted when every request's address is logged (SLUICE_LOG_CLIENT_IP): asked once.
    const address = record?.clientAddress ?? auth.addresses.of(request, server);
    if (record) record.clientAddress = address;
    if (address === undefined || !listHas(networks.list, address)) {
      throw new SluiceError(
        "ip_not_authorized",
        `This API key cannot be used from ${address === undefined ? "an unknown address" : `the address ${address}`}: ${
          networks.of === "key" ? "it is" : "its organization's keys are"
        } bound to other networks.`,
      );
    }
  }
  return caller;
}

/**
 * Adds `caller` to every route of the plugin that uses it. It reads the header itself rather than through
 * @elysiajs/bearer: that plugin derives globally, so Elysia would copy every header into an object and parse the
 * query string on every request of every route (measured: ~6% of the whole-answer throughput), and it would also
 * accept an `access_token` query parameter.
 */
export const authPlugin = (auth: AuthService) => callerPlugin("auth", auth, bearerKey);

/** The same for the Anthropic routes: the key in `x-api-key` (see anthropicKey). */
export const anthropicAuthPlugin = (auth: AuthService) => callerPlugin("anthropic-auth", auth, anthropicKey);

// Elysia keeps one plugin per name: each way of reading the key needs a name of its own.
function callerPlugin(name: string, auth: AuthService, keyOf: (request: Request) => string | undefined) {
  return new Elysia({ name }).resolve({ as: "scoped" }, async ({ request, server }) => ({
    caller: await authenticateRequest(auth, request, server, keyOf(request)),
  }));
}

/** Anthropic's clients send the key in `x-api-key`; a bearer token is taken as well. */
export function anthropicKey(request: Request): string | undefined {
  return request.headers.get("x-api-key")?.trim() || bearerKey(request);
}
