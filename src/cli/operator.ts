import { AccountService } from "../modules/console/accounts";
import { withCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** The password from SLUICE_OPERATOR_PASSWORD, or asked for on the terminal. */
function readPassword(): string {
  const fromEnvironment = process.env.SLUICE_OPERATOR_PASSWORD;
  if (fromEnvironment) return fromEnvironment;
  const answer = prompt("Password for the operator (at least 10 characters):");
  if (!answer) throw new UsageError("no password given (type it, or set SLUICE_OPERATOR_PASSWORD)");
  return answer;
}

/** `sluice operator create EMAIL`: an operator account for the console. */
export async function runOperator(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action !== "create") throw new UsageError(`unknown operator command "${action ?? ""}"`);
  const { positionals } = parseCommand(rest, {}, 1);
  const email = positionals[0] as string;
  try {
    AccountService.checkEmail(email);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const password = readPassword();
  try {
    AccountService.checkPassword(password);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  await withCliContext(async (context) => {
    try {
      const user = await context.accounts.createUser({ email, password, role: "operator", organizationId: null }, context.actor);
      console.log(`${user.id}\t${user.email}\toperator`);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  });
  return 0;
}
