// Usage reports: tokens by organization and model (or key) over a month or a span of hours, for showback and
// chargeback, with the prompt, cached and completion tokens they are made of (hosted APIs price each apart). Read from
// usage_hours or usage_key_months, which the ledger's rows feed and a usage reset never clears.
import { hourMs } from "../../usage-periods";
import { parseTimeBound, timeBoundForms } from "../keys/duration";
import { csvField } from "../requests/service";
import type { UsageReportFilter, UsageReportRow, UsageRepository } from "../../storage/types";

/** What a report is asked for, as the CLI's options and the console's query parameters give it. */
export interface ReportRequest {
  /** A UTC month, `2026-11`; the current one when neither it nor `since` is given. */
  month?: string;
  since?: string;
  until?: string;
  by?: string;
}

export interface UsageReport {
  /** The whole hours covered, in milliseconds: from `since` to before `until`. */
  since: number;
  until: number;
  by: "model" | "key";
  rows: UsageReportRow[];
  total: ReportTotal;
}

/** A report's rows summed. */
export type ReportTotal = Pick<UsageReportRow, "tokens" | "promptTokens" | "completionTokens" | "cachedTokens">;

/** A report's request that cannot be read; `param` names what is wrong (the console's 400, the CLI's option). */
export class ReportRequestError extends Error {
  constructor(
    message: string,
    readonly param: string,
  ) {
    super(message);
  }
}

/**
 * The whole UTC hours a request covers: a month exactly (and its number, as monthOf gives it), or `since` (rounded
 * down to its hour) to `until` (rounded up; now when absent), so that the hour under way is in.
 */
export function reportHours(request: ReportRequest, now: number): Pick<UsageReportFilter, "firstHour" | "endHour" | "month"> {
  if (request.month !== undefined && (request.since !== undefined || request.until !== undefined)) {
    throw new ReportRequestError("Give a month, or since and until, not both.", "month");
  }
  if (request.month !== undefined || request.since === undefined) {
    const month = request.month ?? new Date(now).toISOString().slice(0, 7);
    const match = /^(\d{4})-(0[1-9]|1[0-2])$/.exec(month);
    if (!match) throw new ReportRequestError("month must look like 2026-11.", "month");
    const year = Number(match[1]);
    const index = Number(match[2]) - 1;
    return { firstHour: Date.UTC(year, index, 1) / hourMs, endHour: Date.UTC(year, index + 1, 1) / hourMs, month: year * 12 + index };
  }
  const since = parseTimeBound(request.since, now);
  if (since === undefined) throw new ReportRequestError(`since must be ${timeBoundForms}.`, "since");
  const until = request.until === undefined ? now : parseTimeBound(request.until, now);
  if (until === undefined) throw new ReportRequestError(`until must be ${timeBoundForms}.`, "until");
  const firstHour = Math.floor(since / hourMs);
  const endHour = Math.ceil(until / hourMs);
  if (endHour <= firstHour) throw new ReportRequestError("until must come after since.", "until");
  return { firstHour, endHour };
}

/** Reads a report: checks the request (ReportRequestError), then sums the aggregates. */
export async function usageReport(usage: UsageRepository, request: ReportRequest, now: number, organizationId?: string): Promise<UsageReport> {
  const by = request.by ?? "model";
  if (by !== "model" && by !== "key") throw new ReportRequestError("by must be model or key.", "by");
  const hours = reportHours(request, now);
  const rows = await usage.report({ ...hours, organizationId, by });
  const total: ReportTotal = { tokens: 0, promptTokens: 0, completionTokens: 0, cachedTokens: 0 };
  for (const row of rows) {
    total.tokens += row.tokens;
    total.promptTokens += row.promptTokens;
    total.completionTokens += row.completionTokens;
    total.cachedTokens += row.cachedTokens;
  }
  return { since: hours.firstHour * hourMs, until: hours.endHour * hourMs, by, rows, total };
}

/** A report as CSV, one line per row, for a spreadsheet (cells that would be formulas are escaped). */
export function reportCsv(report: UsageReport): string {
  const kinds = "tokens,prompt_tokens,cached_tokens,completion_tokens";
  const header = report.by === "model" ? `organization,organization_id,model,${kinds}` : `organization,organization_id,key,key_id,${kinds}`;
  const lines = report.rows.map((row) =>
    [
      ...(report.by === "model" ? [row.organization, row.organizationId, row.group] : [row.organization, row.organizationId, row.group, row.keyId]),
      row.tokens,
      row.promptTokens,
      row.cachedTokens,
      row.completionTokens,
    ]
      .map(csvField)
      .join(","),
  );
  return `${[header, ...lines].join("\n")}\n`;
}
