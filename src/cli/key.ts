import type { Config } from "../config/schema";
import { restoreKeyFromLedger } from "../modules/admission/ledger-usage";
import { RedisAdmissionStore } from "../modules/admission/redis-store";
import { parseDuration, parseGrace } from "../modules/keys/duration";
import { capsOf, checkKeyModels, noLimits, type ApiKeyInfo, type KeyLimits } from "../modules/keys/service";
import { formatTime, withCliContext } from "./context";
import { describeNetworks, networksOption } from "./networks";
import { UsageError, parseCommand } from "./usage";

const limitOptions = {
  "max-concurrency": { type: "string" },
  "tokens-per-5h": { type: "string" },
  "tokens-per-month": { type: "string" },
  "requests-per-minute": { type: "string" },
} as const;

const limitFields = {
  "max-concurrency": "maxConcurrency",
  "tokens-per-5h": "tokensPer5h",
  "tokens-per-month": "tokensPerMonth",
  "requests-per-minute": "requestsPerMinute",
} as const;

/** The caps given on the command line over `base`: a whole number from 1, or `none` to remove one. */
function limitsOf(values: Partial<Record<keyof typeof limitFields, string>>, base: KeyLimits): KeyLimits {
  const limits = capsOf(base);
  for (const [option, field] of Object.entries(limitFields) as [keyof typeof limitFields, keyof KeyLimits][]) {
    const value = values[option];
    if (value === undefined) continue;
    if (value === "none") limits[field] = null;
    else if (/^[1-9][0-9]{0,14}$/.test(value)) limits[field] = Number(value);
    else throw new UsageError(`--${option} must be a whole number of at least 1, or none; got "${value}"`);
  }
  return limits;
}

/**
 * `--models a,b`: those model ids, checked against the configuration's; `--models all`: every model of the plan (null).
 */
function modelsOption(value: string, config: Config): string[] | null {
  return checkKeyModels(
    value === "all" ? null : value.split(","),
    config.models.map((model) => model.id),
  );
}

/** `--expires-in 90s|30m|12h|30d` in milliseconds; undefined when not given. */
export function expiryOption(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const milliseconds = parseDuration(value);
  if (milliseconds === undefined) throw new UsageError(`--expires-in must look like 90s, 30m, 12h or 30d, got "${value}"`);
  return milliseconds;
}

function describeLists(key: ApiKeyInfo): string {
  return `${key.models === null ? "all" : key.models.join(",")}\t${describeNetworks(key.networks)}`;
}

function describeLimits(limits: KeyLimits): string {
  const show = (value: number | null) => (value === null ? "-" : String(value));
  return [show(limits.maxConcurrency), show(limits.tokensPer5h), show(limits.tokensPerMonth), show(limits.requestsPerMinute)].join("\t");
}

/** `sluice key create|update|list|revoke`. */
export async function runKey(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action === "create") {
    const { values } = parseCommand(
      rest,
      {
        org: { type: "string" },
        name: { type: "string" },
        "expires-in": { type: "string" },
        models: { type: "string" },
        networks: { type: "string" },
        ...limitOptions,
      },
      0,
    );
    if (!values.org) throw new UsageError("--org NAME is required");
    const expiresInMs = expiryOption(values["expires-in"]);
    const limits = limitsOf(values, noLimits);
    const organizationName = values.org;
    await withCliContext(async (context) => {
      const org = await context.organizations.requireByName(organizationName);
      const models = values.models === undefined ? null : modelsOption(values.models, context.config);
      const networks = networksOption(values.networks) ?? null;
      const { key, secret } = await context.keys.create({ organizationId: org.id, name: values.name, expiresInMs, limits, models, networks }, context.actor);
      console.error(`created key ${key.id} "${key.name}" for ${org.name}, expires ${formatTime(key.expiresAt)}`);
      console.error("this is the only time the key is shown; store it now:");
      console.log(secret);
    });
    return 0;
  }
  if (action === "update") {
    const { values, positionals } = parseCommand(rest, { ...limitOptions, models: { type: "string" }, networks: { type: "string" } }, 1);
    const keyId = positionals[0] as string;
    if (Object.values(values).every((value) => value === undefined))
      throw new UsageError("give at least one of --max-concurrency, --tokens-per-5h, --tokens-per-month, --requests-per-minute, --models, --networks");
    const { models: modelsValue, networks: networksValue, ...limitValues } = values;
    await withCliContext(async (context) => {
      const existing = await context.keys.find(keyId);
      if (modelsValue !== undefined || networksValue !== undefined) {
        const models = modelsValue === undefined ? undefined : modelsOption(modelsValue, context.config);
        const networks = networksOption(networksValue);
        await context.keys.setLists(keyId, { models, networks }, context.actor);
      }
      const updated = await context.keys.setLimits(keyId, limitsOf(limitValues, existing ?? noLimits), context.actor);
      // Shared mode: the caps are enforced in Redis, where this key's usage so far must be before its next request.
      // (A server on the same SQLite file reads it from the ledger itself when it sees the change.)
      if (context.redis) {
        const shared = new RedisAdmissionStore(context.redis, context.storage.usage, context.storage.keys);
        try {
          await restoreKeyFromLedger(shared, context.storage.usage, updated, Date.now());
        } finally {
          shared.close();
        }
      }
      console.log(`${updated.id}\t${describeLimits(updated)}\t${describeLists(updated)}`);
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
          [
            key.id,
            key.name,
            key.prefix,
            formatTime(key.createdAt),
            formatTime(key.lastUsedAt),
            formatTime(key.expiresAt),
            formatTime(key.revokedAt),
            describeLimits(key),
            describeLists(key),
          ].join("\t"),
        );
      }
    });
    return 0;
  }
  if (action === "rotate") {
    const { values, positionals } = parseCommand(rest, { grace: { type: "string" }, "expires-in": { type: "string" } }, 1);
    const grace = values.grace ?? "24h";
    const graceMs = parseGrace(grace);
    if (graceMs === undefined) throw new UsageError(`--grace must be now, or look like 90s, 30m, 12h or 30d, got "${grace}"`);
    const expiresInMs = expiryOption(values["expires-in"]);
    await withCliContext(async (context) => {
      const { key, secret, previous } = await context.keys.rotate(positionals[0] as string, { graceMs, expiresInMs }, context.actor);
      console.error(`created key ${key.id} "${key.name}" in place of ${previous.id}, expires ${formatTime(key.expiresAt)}`);
      console.error(previous.revokedAt === null ? `${previous.id} keeps working until ${formatTime(previous.expiresAt)}` : `${previous.id} is revoked`);
      console.error("this is the only time the new key is shown; store it now:");
      console.log(secret);
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
