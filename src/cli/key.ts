import { parseDuration } from "../modules/keys/duration";
import { formatTime, withCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** `sluice key create|list|revoke`. */
export async function runKey(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action === "create") {
    const { values } = parseCommand(rest, { org: { type: "string" }, name: { type: "string" }, "expires-in": { type: "string" } }, 0);
    if (!values.org) throw new UsageError("--org NAME is required");
    const expiresIn = values["expires-in"];
    const expiresInMs = expiresIn === undefined ? undefined : parseDuration(expiresIn);
    if (expiresIn !== undefined && expiresInMs === undefined) throw new UsageError(`--expires-in must look like 90s, 30m, 12h or 30d, got "${expiresIn}"`);
    const organizationName = values.org;
    await withCliContext(async (context) => {
      const org = await context.organizations.requireByName(organizationName);
      const { key, secret } = await context.keys.create({ organizationId: org.id, name: values.name, expiresInMs }, context.actor);
      console.error(`created key ${key.id} "${key.name}" for ${org.name}, expires ${formatTime(key.expiresAt)}`);
      console.error("this is the only time the key is shown; store it now:");
      console.log(secret);
    });
    return 0;
  }
  if (action === "list") {
    const { values } = parseCommand(rest, { org: { type: "string" } }, 0);
    if (!values.org) throw new UsageError("--org NAME is required");
    const organizationName = values.org;
    await withCliContext(async (context) => {
      const org = await context.organizations.requireByName(organizationName);
      for (const key of await context.keys.listForOrganization(org.id)) {
        console.log(
          [key.id, key.name, key.prefix, formatTime(key.createdAt), formatTime(key.lastUsedAt), formatTime(key.expiresAt), formatTime(key.revokedAt)].join("\t"),
        );
      }
    });
    return 0;
  }
  if (action === "revoke") {
    const { positionals } = parseCommand(rest, {}, 1);
    await withCliContext(async (context) => {
      const key = await context.keys.revoke(positionals[0] as string, context.actor);
      console.log(`${key.id}\trevoked\t${formatTime(key.revokedAt)}`);
    });
    return 0;
  }
  throw new UsageError(`unknown key command "${action ?? ""}"`);
}
