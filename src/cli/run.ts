import { ConfigError } from "../config/load";
import { DatabaseTooNewError } from "../db/migrate";
import { BackendError } from "../storage/open";
import { ListenError } from "../server";
import { NetworkListError } from "../modules/keys/networks";
import { KeyError } from "../modules/keys/service";
import { OrganizationError } from "../modules/organizations/service";
import { runKey } from "./key";
import { runLedger } from "./ledger";
import { runOrg } from "./org";
import { runRefusals } from "./refusals";
import { runRequests } from "./requests";
import { runAudit } from "./audit";
import { runServe } from "./serve";
import { runUsage } from "./usage-command";
import { runBackup } from "./backup";
import { runDoctor } from "./doctor";
import { runMember, runOperator } from "./operator";
import { runToken } from "./token";
import { CommandError, UsageError, parseCommand, usageText } from "./usage";

const commands: Record<string, (args: string[]) => number | Promise<number>> = {
  serve: runServe,
  org: runOrg,
  key: runKey,
  usage: runUsage,
  refusals: runRefusals,
  requests: runRequests,
  audit: runAudit,
  backup: runBackup,
  ledger: runLedger,
  operator: runOperator,
  member: runMember,
  token: runToken,
  doctor: (args) => {
    parseCommand(args, {}, 0);
    return runDoctor();
  },
};

/** Runs one command; returns the process exit code. */
export async function runCommand(argv: string[]): Promise<number> {
  const [command = "serve", ...args] = argv;
  if (command === "help" || command === "--help" || command === "-h") {
    console.log(usageText);
    return 0;
  }
  try {
    const run = commands[command];
    if (!run) throw new UsageError(`unknown command "${command}"`);
    return (await run(args)) ?? 0;
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`sluice: ${error.message}\n\n${usageText}`);
      return 2;
    }
    if (error instanceof OrganizationError || error instanceof KeyError || error instanceof NetworkListError) {
      console.error(`sluice: ${error.message}`);
      return 2;
    }
    if (
      error instanceof CommandError ||
      error instanceof ConfigError ||
      error instanceof DatabaseTooNewError ||
      error instanceof BackendError ||
      error instanceof ListenError
    ) {
      console.error(`sluice: ${error.message}`);
      return 1;
    }
    throw error;
  }
}
