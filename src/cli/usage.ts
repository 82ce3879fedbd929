import { parseArgs, type ParseArgsConfig } from "node:util";

/** A mistake in the command line: printed with the usage, exit code 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** The command was understood but could not be carried out (a file it cannot write): printed alone, exit code 1. */
export class CommandError extends Error {
  override name = "CommandError";
}

export const usageText = `Usage: sluice <command>

  serve                                   start the server (the default)
  org create NAME [--plan PLAN] [--status active|waitlist|suspended]
  org update NAME [--plan PLAN] [--status active|waitlist|suspended]
  org list
  key create --org NAME [--name LABEL] [--expires-in 90s|30m|12h|30d]
             [--max-concurrency N] [--tokens-per-5h N] [--tokens-per-month N] [--requests-per-minute N]
             [--models ID,ID]
  key update KEY_ID [--max-concurrency N|none] [--tokens-per-5h N|none] [--tokens-per-month N|none]
             [--requests-per-minute N|none] [--models ID,ID|all]
                                          the key's own caps and models, inside its organization's plan
  key list --org NAME
  key rotate KEY_ID [--grace 24h|now] [--expires-in 30d]
                                          a new key with the same label, caps and models; the old one works for the grace
  key revoke KEY_ID
  usage --org NAME                        5-hour and monthly usage: used, limit, remaining
  usage reset --org NAME                  forget the organization's usage so far (a running server honours it)
  usage report [--month 2026-11 | --since T [--until T]] [--org NAME] [--by model|key] [--csv]
                                          tokens by organization and model (or key); this month unless given
  refusals [--since 24h]                  red-line refusals by rule, then the latest ones (never their text)
  requests [--org NAME] [--since 24h] [--until T] [--outcome X] [--id REQ_ID] [--key KEY_ID] [--model M]
           [--limit 50] [--csv]               the request log, newest first (--csv: every matching row)
  audit [--since 7d] [--action A] [--org NAME] [--limit 200]
                                          who changed what: organizations, keys, accounts, resets, sign-ins
  operator create EMAIL                   a console operator (password from SLUICE_OPERATOR_PASSWORD, or asked)
  member create EMAIL --org NAME          a console member of an organization (password from SLUICE_MEMBER_PASSWORD, or asked)
  token create EMAIL --name NAME [--expires-in 90d]
                                          a console token for scripts (Authorization: Bearer), acting as that account
  token list [--email EMAIL]              console tokens: id, name, account, prefix, created, expires, revoked
  token revoke TOKEN_ID                   the token fails from its next use on
  backup PATH                             a consistent copy of the database, safe while the server runs
  ledger prune [--days N]                 delete now the ledger rows past [ledger] retention_days (or N days)
  doctor                                  check the configuration, the database and every upstream

Environment: SLUICE_DB (data/sluice.db), SLUICE_CONFIG (data/sluice.toml), SLUICE_HOST (127.0.0.1), SLUICE_PORT (8080),
SLUICE_LOG_LEVEL (info), SLUICE_METRICS_TOKEN (unset: /metrics is open), SLUICE_DRAIN_MS (30000)`;

type Options = NonNullable<ParseArgsConfig["options"]>;

/** node:util parseArgs in strict mode, with its errors turned into UsageError. */
export function parseCommand<T extends Options>(args: string[], options: T, positionals: number) {
  const parse = () => {
    try {
      return parseArgs({ args, options, strict: true, allowPositionals: true });
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  };
  const parsed = parse();
  if (parsed.positionals.length !== positionals) {
    throw new UsageError(`expected ${positionals} argument${positionals === 1 ? "" : "s"}, got ${parsed.positionals.length}`);
  }
  return parsed;
}
