import type { ConsoleTokenInfo } from "../storage/types";
import { expiryOption } from "./key";
import { formatTime, withCliContext } from "./context";
import { CommandError, UsageError, parseCommand } from "./usage";

function describe(token: ConsoleTokenInfo): string {
  return [
    token.id,
    token.name,
    token.email,
    token.prefix,
    formatTime(token.createdAt),
    formatTime(token.lastUsedAt),
    formatTime(token.expiresAt),
    formatTime(token.revokedAt),
  ].join("\t");
}

/** `sluice token create|list|revoke`: console tokens, for scripts that drive the console API. */
export async function runToken(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action === "create") {
    const { values, positionals } = parseCommand(rest, { name: { type: "string" }, "expires-in": { type: "string" } }, 1);
    const email = positionals[0] as string;
    if (!values.name?.trim()) throw new UsageError("--name NAME is required (what the token is for)");
    const name = values.name;
    const expiresInMs = expiryOption(values["expires-in"]);
    await withCliContext(async (context) => {
      const user = await context.accounts.findByEmail(email);
      if (!user) throw new CommandError(`no console account with the email "${email}"`);
      const { token, secret } = await context.accounts.tokens.create({ owner: user, name, expiresInMs }, context.actor);
      console.error(`created console token ${token.id} "${token.name}" for ${user.email} (${user.role}), expires ${formatTime(token.expiresAt)}`);
      console.error("this is the only time the token is shown; store it now:");
      console.log(secret);
    });
    return 0;
  }
  if (action === "list") {
    const { values } = parseCommand(rest, { email: { type: "string" } }, 0);
    await withCliContext(async (context) => {
      let userId: string | undefined;
      if (values.email !== undefined) {
        const user = await context.accounts.findByEmail(values.email);
        if (!user) throw new CommandError(`no console account with the email "${values.email}"`);
        userId = user.id;
      }
      for (const token of await context.accounts.tokens.list(userId)) console.log(describe(token));
    });
    return 0;
  }
  if (action === "revoke") {
    const { positionals } = parseCommand(rest, {}, 1);
    await withCliContext(async (context) => {
      const found = await context.accounts.tokens.find(positionals[0] as string);
      if (!found) throw new CommandError(`no console token with the id "${positionals[0]}"`);
      console.log(describe(await context.accounts.tokens.revoke(found, context.actor)));
    });
    return 0;
  }
  throw new UsageError(`unknown token command "${action ?? ""}"`);
}
