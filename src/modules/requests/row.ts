// A row of the request log, without imports: the server, the console's pages and the tests share it.

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
  firstTokenMs: number | null;
  usageSource: string;
}
