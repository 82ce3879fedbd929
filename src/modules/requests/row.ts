// A row of the request log, without imports: the server, the console's pages and the tests share it.

/** What a row counted against the token quotas: its tokens at its model's weight then (see quota-weight.ts). */
export function countedTokens(row: Pick<RequestLogRow, "promptTokens" | "completionTokens" | "quotaTokens">): number {
  return row.quotaTokens ?? row.promptTokens + row.completionTokens;
}

/** How a request ended, as its ledger row says. */
export const outcomes = ["completed", "content_filter", "client_disconnected", "upstream_error", "shutdown"] as const;

export type Outcome = (typeof outcomes)[number];

/** A ledger row as the request log shows it, with its key's label and its organization's name. */
export interface RequestLogRow {
  requestId: string;
  startedAt: number;
  endedAt: number;
  organizationId: string;
  organization: string | null;
  keyId: string;
  keyName: string | null;
  model: string;
  outcome: string;
  errorCode: string | null;
  ruleId: string | null;
  promptTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  /** Of the prompt tokens, those the upstream read from its prompt cache. */
  cachedTokens: number;
  /** What the quotas counted, when its model's quota_weight is not 1; null: prompt + completion. */
  quotaTokens: number | null;
  firstTokenMs: number | null;
  usageSource: string;
}
