// The request log (members: their organization; operators: every one) and the operator's audit trail.
import { useEffect, useState } from "preact/hooks";
import { type AuditEntry, auditActions } from "../../audit/entry";
import { countedTokens, outcomes, type RequestLogRow } from "../../requests/row";
import { api } from "./api";
import { ErrorText } from "./error-text";

/** The form's non-empty fields as a query string. */
export function queryOf(filters: Record<string, string>, cursor?: string): string {
  const parameters = new URLSearchParams();
  for (const [name, value] of Object.entries(filters)) if (value.trim()) parameters.set(name, value.trim());
  if (cursor) parameters.set("cursor", cursor);
  const text = parameters.toString();
  return text ? `?${text}` : "";
}

export function formValues(form: HTMLFormElement): Record<string, string> {
  const values: Record<string, string> = {};
  for (const [name, value] of new FormData(form)) values[name] = String(value);
  return values;
}

/** Loads pages of a log: the first for new filters, the next appended after the last row. */
function usePages<T>(path: string, itemsOf: (page: Record<string, unknown>) => T[]) {
  const [filters, setFilters] = useState<Record<string, string>>({});
  const [items, setItems] = useState<T[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [error, setError] = useState("");
  const load = async (nextFilters: Record<string, string>, after?: string) => {
    setError("");
    try {
      const page = await api<Record<string, unknown>>(`${path}${queryOf(nextFilters, after)}`);
      setItems((current) => (after ? [...current, ...itemsOf(page)] : itemsOf(page)));
      setCursor((page.nextCursor as string | null) ?? null);
      setFilters(nextFilters);
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  useEffect(() => void load({}), []);
  return { filters, items, cursor, error, load };
}

export function RequestsPage({ operator }: { operator: boolean }) {
  const { filters, items, cursor, error, load } = usePages<RequestLogRow>("/requests", (page) => page.rows as RequestLogRow[]);
  const submit = (event: Event) => {
    event.preventDefault();
    void load(formValues(event.target as HTMLFormElement));
  };
  return (
    <section aria-labelledby="requests-title">
      <h2 id="requests-title">Requests</h2>
      <p>One row per request that reached a model. Prompts and answers are never stored; only what is shown here.</p>
      <form class="filters" onSubmit={submit}>
        <label>
          Request id
          <input name="id" placeholder="req_…" />
        </label>
        <label>
          Since
          <input name="since" placeholder="24h, 7d or 2026-11-01" />
        </label>
        <label>
          Until
          <input name="until" placeholder="1h or 2026-11-02T12:00" />
        </label>
        <label>
          Key id
          <input name="key" placeholder="key_…" />
        </label>
        <label>
          Model
          <input name="model" />
        </label>
        <label>
          Outcome
          <select name="outcome">
            <option value="">any</option>
            {outcomes.map((outcome) => (
              <option key={outcome}>{outcome}</option>
            ))}
          </select>
        </label>
        {operator && (
          <label>
            Organization id
            <input name="organization" placeholder="org_…" />
          </label>
        )}
        <div class="actions">
          <button type="submit" class="primary">
            Show requests
          </button>
          <a class="button" href={`/console/api/requests.csv${queryOf(filters)}`} download>
            Download CSV
          </a>
        </div>
      </form>
      <ErrorText error={error} />
      <div class="table-wrap">
        <table data-testid="request-log">
          <thead>
            <tr>
              <th scope="col">Ended</th>
              <th scope="col">Request id</th>
              {operator && <th scope="col">Organization</th>}
              <th scope="col">Key</th>
              <th scope="col">Model</th>
              <th scope="col">Outcome</th>
              <th scope="col">Prompt (cached) / completion / reasoning</th>
              <th scope="col">Counted</th>
              <th scope="col">Duration</th>
              <th scope="col">First token</th>
            </tr>
          </thead>
          <tbody>
            {items.map((row) => (
              <tr key={row.requestId}>
                <td>{new Date(row.endedAt).toLocaleString()}</td>
                <td class="mono">{row.requestId}</td>
                {operator && <td>{row.organization ?? row.organizationId}</td>}
                <td>{row.keyName ?? row.keyId}</td>
                <td>{row.model}</td>
                <td>
                  {row.outcome}
                  {row.ruleId && ` (rule ${row.ruleId})`}
                  {row.errorCode && ` (${row.errorCode})`}
                </td>
                <td>
                  {row.promptTokens}
                  {row.cachedTokens > 0 && ` (${row.cachedTokens})`} / {row.completionTokens} / {row.reasoningTokens}
                </td>
                <td data-testid={`counted-${row.requestId}`}>{countedTokens(row)}</td>
                <td>{row.endedAt - row.startedAt} ms</td>
                <td>{row.firstTokenMs === null ? "—" : `${row.firstTokenMs} ms`}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {items.length === 0 && !error && <p>No requests match.</p>}
      {cursor && (
        <button type="button" onClick={() => void load(filters, cursor)}>
          Older requests
        </button>
      )}
    </section>
  );
}

export function AuditPage() {
  const { filters, items, cursor, error, load } = usePages<AuditEntry>("/operator/audit", (page) => page.entries as AuditEntry[]);
  const submit = (event: Event) => {
    event.preventDefault();
    void load(formValues(event.target as HTMLFormElement));
  };
  return (
    <section aria-labelledby="audit-title">
      <h2 id="audit-title">Audit trail</h2>
      <form class="filters" onSubmit={submit}>
        <label>
          Since
          <input name="since" placeholder="7d or 2026-11-01" />
        </label>
        <label>
          Action
          <select name="action">
            <option value="">any</option>
            {auditActions.map((action) => (
              <option key={action}>{action}</option>
            ))}
          </select>
        </label>
        <label>
          Actor
          <input name="actor" placeholder="an email or a user" />
        </label>
        <div class="actions">
          <button type="submit" class="primary">
            Show changes
          </button>
        </div>
      </form>
      <ErrorText error={error} />
      <div class="table-wrap">
        <table data-testid="audit-trail">
          <thead>
            <tr>
              <th scope="col">Time</th>
              <th scope="col">Actor</th>
              <th scope="col">Action</th>
              <th scope="col">Target</th>
              <th scope="col">Change</th>
            </tr>
          </thead>
          <tbody>
            {items.map((entry) => (
              <tr key={entry.id}>
                <td>{new Date(entry.at).toLocaleString()}</td>
                <td>
                  {entry.actor} ({entry.address ? `${entry.actorKind}, ${entry.address}` : entry.actorKind})
                </td>
                <td>{entry.action}</td>
                <td>{entry.target}</td>
                <td>
                  {entry.changes
                    ? Object.entries(entry.changes)
                        .map(([field, [before, after]]) => (before === null ? `${field}: ${String(after)}` : `${field}: ${String(before)} → ${String(after)}`))
                        .join("; ")
                    : "—"}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {items.length === 0 && !error && <p>Nothing recorded for these filters.</p>}
      {cursor && (
        <button type="button" onClick={() => void load(filters, cursor)}>
          Older entries
        </button>
      )}
    </section>
  );
}
