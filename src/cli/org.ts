import { organizationStatuses, type OrganizationStatus } from "../modules/organizations/service";
import { openCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

function statusOf(value: string | undefined): OrganizationStatus | undefined {
  if (value === undefined) return undefined;
  if (!(organizationStatuses as readonly string[]).includes(value)) {
    throw new UsageError(`--status must be one of ${organizationStatuses.join(", ")}, got "${value}"`);
  }
  return value as OrganizationStatus;
}

const changeOptions = { plan: { type: "string" }, status: { type: "string" } } as const;

/** `sluice org create|update|list`. */
export function runOrg(args: string[]): void {
  const [action, ...rest] = args;
  if (action === "list") {
    parseCommand(rest, {}, 0);
    const context = openCliContext();
    for (const org of context.organizations.list()) {
      console.log([org.id, org.name, org.plan, org.status, new Date(org.createdAt).toISOString()].join("\t"));
    }
    return;
  }
  if (action !== "create" && action !== "update") throw new UsageError(`unknown org command "${action ?? ""}"`);
  const { values, positionals } = parseCommand(rest, changeOptions, 1);
  const status = statusOf(values.status);
  const context = openCliContext();
  const name = positionals[0] as string;
  const org =
    action === "create"
      ? context.organizations.create({ name, plan: values.plan, status })
      : context.organizations.update(name, { plan: values.plan, status });
  console.log([org.id, org.name, org.plan, org.status].join("\t"));
}
