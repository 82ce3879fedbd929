import { organizationStatuses, type OrganizationStatus } from "../modules/organizations/service";
import { withCliContext } from "./context";
import { describeNetworks, networksOption } from "./networks";
import { UsageError, parseCommand } from "./usage";

function statusOf(value: string | undefined): OrganizationStatus | undefined {
  if (value === undefined) return undefined;
  if (!(organizationStatuses as readonly string[]).includes(value)) {
    throw new UsageError(`--status must be one of ${organizationStatuses.join(", ")}, got "${value}"`);
  }
  return value as OrganizationStatus;
}

const changeOptions = { plan: { type: "string" }, status: { type: "string" }, networks: { type: "string" } } as const;

/** `sluice org create|update|list`. */
export async function runOrg(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action === "list") {
    parseCommand(rest, {}, 0);
    await withCliContext(async (context) => {
      for (const org of await context.organizations.list()) {
        console.log([org.id, org.name, org.plan, org.status, new Date(org.createdAt).toISOString(), describeNetworks(org.networks)].join("\t"));
      }
    });
    return 0;
  }
  if (action !== "create" && action !== "update") throw new UsageError(`unknown org command "${action ?? ""}"`);
  const { values, positionals } = parseCommand(rest, changeOptions, 1);
  const status = statusOf(values.status);
  const networks = networksOption(values.networks);
  const name = positionals[0] as string;
  await withCliContext(async (context) => {
    const org =
      action === "create"
        ? await context.organizations.create({ name, plan: values.plan, status, networks }, context.actor)
        : await context.organizations.update(name, { plan: values.plan, status, networks }, context.actor);
    console.log([org.id, org.name, org.plan, org.status, describeNetworks(org.networks)].join("\t"));
  });
  return 0;
}
