import { parseTimeBound, timeBoundForms } from "../modules/keys/duration";
import { checkOutcome, maxPageSize, RequestLogService, type RequestLogFilter } from "../modules/requests/service";
import { countedTokens } from "../modules/requests/row";
import { formatTime, withCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

const options = {
  org: { type: "string" },
  since: { type: "string" },
  until: { type: "string" },
  outcome: { type: "string" },
  id: { type: "string" },
  key: { type: "string" },
  model: { type: "string" },
  limit: { type: "string" },
  csv: { type: "boolean" },
} as const;

function timeOption(name: string, value: string | undefined, now: number): number | undefined {
  if (value === undefined) return undefined;
  const time = parseTimeBound(value, now);
  if (time === undefined) throw new UsageError(`--${name} must be ${timeBoundForms}; got "${value}"`);
  return time;
}

/** `sluice requests`: the request log, newest first; `--csv` writes every matching row as CSV. */
export async function runRequests(args: string[]): Promise<number> {
  const { values } = parseCommand(args, options, 0);
  const now = Date.now();
  const limit = values.limit === undefined ? 50 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > maxPageSize) throw new UsageError(`--limit must be from 1 to ${maxPageSize}`);
  let outcome: string | undefined;
  try {
    outcome = values.outcome === undefined ? undefined : checkOutcome(values.outcome);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  await withCliContext(async (context) => {
    const organization = values.org === undefined ? undefined : await context.organizations.requireByName(values.org);
    const filter: Omit<RequestLogFilter, "limit" | "after"> = {
      organizationId: organization?.id,
      since: timeOption("since", values.since ?? (values.id ? undefined : "24h"), now),
      until: timeOption("until", values.until, now),
      outcome,
      requestId: values.id,
      keyId: values.key,
      model: values.model,
    };
    const log = new RequestLogService(context.storage.requestLog);
    if (values.csv) {
      for await (const chunk of log.csv(filter)) process.stdout.write(chunk);
      return;
    }
    const { rows, nextCursor } = await log.page(filter, { limit });
    console.log(
      [
        "ended_at",
        "request_id",
        "organization",
        "key",
        "model",
        "outcome",
        "prompt",
        "cached",
        "completion",
        "reasoning",
        "counted",
        "duration_ms",
        "first_token_ms",
        "rule",
      ].join("\t"),
    );
    for (const row of rows) {
      console.log(
        [
          formatTime(row.endedAt),
          row.requestId,
          row.organization ?? row.organizationId,
          row.keyName ?? row.keyId,
          row.model,
          row.errorCode ? `${row.outcome} (${row.errorCode})` : row.outcome,
          row.promptTokens,
          row.cachedTokens,
          row.completionTokens,
          row.reasoningTokens,
          countedTokens(row),
          row.endedAt - row.startedAt,
          row.firstTokenMs ?? "-",
          row.ruleId ?? "-",
        ].join("\t"),
      );
    }
    if (nextCursor) console.error(`more rows match: narrow the filters, raise --limit, or use --csv for all of them`);
  });
  return 0;
}
