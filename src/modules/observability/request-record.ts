/** What is known about one request by the time it ends: for its log line and its metrics. */
export interface RequestRecord {
  requestId: string;
  method: string;
  route: string;
  startedAt: number;
  model?: string;
  organizationId?: string;
  keyId?: string;
  status?: number;
  code?: string;
  outcome?: string;
  ruleId?: string;
  promptTokens?: number;
  completionTokens?: number;
  reasoningTokens?: number;
  firstTokenAt?: number;
  /** Set for streams: the record is finished when the stream ends, not when the response starts. */
  deferred?: boolean;
}

const records = new WeakMap<Request, RequestRecord>();

export function startRecord(request: Request, requestId: string, route: string): RequestRecord {
  const record: RequestRecord = { requestId, method: request.method, route, startedAt: performance.now() };
  records.set(request, record);
  return record;
}

export function recordOf(request: Request): RequestRecord | undefined {
  return records.get(request);
}
