import { AccountService } from "../modules/console/accounts";
import type { Role } from "../storage/types";
import { withCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** The password from the environment variable named, or asked for on the terminal. */
function readPassword(variable: string, who: string): string {
  const fromEnvironment = process.env[variable];
  if (fromEnvironment) return fromEnvironment;
  const answer = prompt(`Password for the ${who} (at least 10 characters):`);
  if (!answer) throw new UsageError(`no password given (type it, or set ${variable})`);
  return answer;
}

/** The email, checked before a password is asked for it. */
function checkedEmail(email: string): string {
  try {
    AccountService.checkEmail(email);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  return email;
}

/** A console account; its password is checked before the database is opened. */
async function createAccount(email: string, role: Role, password: string, organizationName?: string): Promise<void> {
  try {
    AccountService.checkPassword(password);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  await withCliContext(async (context) => {
    const organization = organizationName === undefined ? undefined : await context.organizations.requireByName(organizationName);
    try {
      const user = await context.accounts.createUser({ email, password, role, organizationId: organization?.id ?? null }, context.actor);
      console.log([user.id, user.email, role, ...(organization ? [organization.name] : [])].join("\t"));
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  });
}

/** `sluice operator create EMAIL`: an operator account for the console. */
export async function runOperator(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action !== "create") throw new UsageError(`unknown operator command "${action ?? ""}"`);
  const { positionals } = parseCommand(rest, {}, 1);
  const email = checkedEmail(positionals[0] as string);
  await createAccount(email, "operator", readPassword("SLUICE_OPERATOR_PASSWORD", "operator"));
  return 0;
}

/** `sluice member create EMAIL --org NAME`: a member account of an organization (where sign-up is closed, the way in). */
export async function runMember(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action !== "create") throw new UsageError(`unknown member command "${action ?? ""}"`);
  const { values, positionals } = parseCommand(rest, { org: { type: "string" } }, 1);
  if (!values.org) throw new UsageError("--org NAME is required");
  const email = checkedEmail(positionals[0] as string);
  await createAccount(email, "member", readPassword("SLUICE_MEMBER_PASSWORD", "member"), values.org);
  return 0;
}
