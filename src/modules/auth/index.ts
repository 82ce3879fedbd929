import { bearer } from "@elysiajs/bearer";
import { Elysia } from "elysia";
import { recordOf } from "../observability/request-record";
import type { AuthService } from "./service";

/**
 * Adds `caller` to every route of the plugin that uses it. The key is read from `Authorization: Bearer` only:
 * the bearer plugin would also accept an `access_token` query parameter, which would put keys in access logs.
 */
export const authPlugin = (auth: AuthService) =>
  new Elysia({ name: "auth" })
    .use(bearer())
    .resolve({ as: "scoped" }, ({ bearer: token, headers, request }) => {
      const caller = auth.authenticate(headers.authorization?.startsWith("Bearer ") ? token?.trim() : undefined);
      const record = recordOf(request);
      if (record) {
        record.organizationId = caller.organizationId;
        record.keyId = caller.keyId;
      }
      return { caller };
    });
