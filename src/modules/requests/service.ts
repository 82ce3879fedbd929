import { invalidRequest } from "../../errors";
import { countedTokens, outcomes } from "./row";
import type { RequestLogCursor, RequestLogFilter, RequestLogRepository, RequestLogRow } from "../../storage/types";

export type { RequestLogFilter };

export { outcomes } from "./row";

export const defaultPageSize = 50;
export const maxPageSize = 500;
/** Rows read per query while a CSV export streams: memory stays at one page whatever the export's size. */
const exportPageSize = 1000;

/** A page of the log and where the next one starts (null on the last page). */
export interface RequestLogPage {
  rows: RequestLogRow[];
  nextCursor: string | null;
}

/** The cursor as the caller sees it: opaque, but only the last row's time and id. */
function encodeCursor(row: RequestLogCursor): string {
  return Buffer.from(`${row.endedAt}.${row.requestId}`).toString("base64url");
}

/** Reads a cursor back; 400 naming `cursor` when it is not one this server wrote. */
function decodeCursor(cursor: string): RequestLogCursor {
  const text = Buffer.from(cursor, "base64url").toString();
  const match = /^(\d{1,15})\.(req_[0-9a-zA-Z_-]{1,64})$/.exec(text);
  if (!match) throw invalidRequest("This cursor is not one the request log gave out; start again without it.", "cursor");
  return { endedAt: Number(match[1]), requestId: match[2] as string };
}

/** Checks an outcome filter; 400 naming `outcome` otherwise. */
export function checkOutcome(outcome: string): string {
  if (!(outcomes as readonly string[]).includes(outcome)) throw invalidRequest(`outcome must be one of ${outcomes.join(", ")}.`, "outcome");
  return outcome;
}

const csvColumns = [
  "ended_at",
  "request_id",
  "organization",
  "key_id",
  "key",
  "model",
  "outcome",
  "error_code",
  "rule_id",
  "prompt_tokens",
  "completion_tokens",
  "reasoning_tokens",
  "cached_tokens",
  "quota_tokens",
  "duration_ms",
  "first_token_ms",
  "usage_source",
] as const;

/** One CSV cell, safe to open in a spreadsheet. */
export function csvField(value: string | number | null): string {
  if (value === null) return "";
  const text = String(value);
  // A leading =, +, - or @ would be a formula in a spreadsheet: quoted and prefixed, as OWASP advises.
  const safe = /^[=+\-@\t\r]/.test(text) ? `'${text}` : text;
  return /[",\n\r]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
}

function csvLine(row: RequestLogRow): string {
  return `${[
    new Date(row.endedAt).toISOString(),
    row.requestId,
    row.organization ?? row.organizationId,
    row.keyId,
    row.keyName,
    row.model,
    row.outcome,
    row.errorCode,
    row.ruleId,
    row.promptTokens,
    row.completionTokens,
    row.reasoningTokens,
    row.cachedTokens,
    countedTokens(row),
    row.endedAt - row.startedAt,
    row.firstTokenMs,
    row.usageSource,
  ]
    .map(csvField)
    .join(",")}\n`;
}

/**
 * The request log: the ledger's rows, newest first, filtered and paged by cursor (never OFFSET, so that page 1,000
 * costs what page 1 does). Authorization is the caller's: it passes the organization a member may see.
 */
export class RequestLogService {
  constructor(private readonly repository: RequestLogRepository) {}

  async page(filter: Omit<RequestLogFilter, "limit" | "after">, options: { cursor?: string; limit?: number } = {}): Promise<RequestLogPage> {
    const limit = Math.min(Math.max(options.limit ?? defaultPageSize, 1), maxPageSize);
    const after = options.cursor ? decodeCursor(options.cursor) : undefined;
    // One row more than asked tells whether there is a next page without a count.
    const rows = await this.repository.page({ ...filter, after, limit: limit + 1 });
    const more = rows.length > limit;
    if (more) rows.length = limit;
    const last = rows.at(-1);
    return { rows, nextCursor: more && last ? encodeCursor(last) : null };
  }

  /** Every matching row as CSV, read a page at a time as the client takes it. */
  csv(filter: Omit<RequestLogFilter, "limit" | "after">): ReadableStream<string> {
    let after: RequestLogCursor | undefined;
    let headerSent = false;
    return new ReadableStream<string>({
      pull: async (controller) => {
        if (!headerSent) {
          headerSent = true;
          controller.enqueue(`${csvColumns.join(",")}\n`);
          return;
        }
        const rows = await this.repository.page({ ...filter, after, limit: exportPageSize });
        if (rows.length > 0) controller.enqueue(rows.map(csvLine).join(""));
        const last = rows.at(-1);
        if (rows.length < exportPageSize || !last) controller.close();
        else after = { endedAt: last.endedAt, requestId: last.requestId };
      },
    });
  }
}
