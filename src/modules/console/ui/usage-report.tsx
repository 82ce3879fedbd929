// The usage report: tokens by organization and model (or key) in a month, with the prompt (of which cached) and
// completion tokens they are made of, for showback and chargeback; members see their own organization, operators
// every one. The same rows as `sluice usage report`, and as CSV.
import { useEffect, useState } from "preact/hooks";
import { api } from "./api";
import { ErrorText } from "./error-text";
import { formValues, queryOf } from "./logs";

/** Tokens, and the prompt (of which cached) and completion tokens they are made of. */
interface TokenKinds {
  tokens: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
}
interface ReportRow extends TokenKinds {
  organizationId: string;
  organization: string;
  group: string;
  keyId: string | null;
}
interface Report {
  since: number;
  until: number;
  by: "model" | "key";
  rows: ReportRow[];
  total: TokenKinds;
}

function TokenCells({ row }: { row: TokenKinds }) {
  return (
    <>
      <td>{row.tokens.toLocaleString()}</td>
      <td>{row.promptTokens.toLocaleString()}</td>
      <td>{row.cachedTokens.toLocaleString()}</td>
      <td>{row.completionTokens.toLocaleString()}</td>
    </>
  );
}

export function UsageReportSection({ operator }: { operator: boolean }) {
  const [filters, setFilters] = useState<Record<string, string>>({ month: new Date().toISOString().slice(0, 7), by: "model" });
  const [report, setReport] = useState<Report | null>(null);
  const [error, setError] = useState("");
  const load = async (next: Record<string, string>) => {
    setError("");
    try {
      setReport(await api<Report>(`/usage-report${queryOf(next)}`));
      setFilters(next);
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  useEffect(() => void load(filters), []);
  const submit = (event: Event) => {
    event.preventDefault();
    void load(formValues(event.target as HTMLFormElement));
  };
  return (
    <section aria-labelledby="report-title">
      <h2 id="report-title">Usage report</h2>
      <p>
        Tokens by {operator ? "organization and " : ""}model or key in a UTC month: prompt (of which cached, read from the model server's cache) and completion.
      </p>
      <form class="filters" onSubmit={submit}>
        <label>
          Month
          <input name="month" type="month" defaultValue={filters.month} required />
        </label>
        <label>
          By
          <select name="by" defaultValue={filters.by}>
            <option value="model">model</option>
            <option value="key">key</option>
          </select>
        </label>
        <button type="submit">Show report</button>
        <a class="button" href={`/console/api/usage-report.csv${queryOf(filters)}`} download>
          Download report CSV
        </a>
      </form>
      <ErrorText error={error} />
      {report && (
        <div class="table-wrap">
          <table data-testid="usage-report">
            <caption class="visually-hidden">Tokens by {report.by}</caption>
            <thead>
              <tr>
                {operator && <th scope="col">Organization</th>}
                <th scope="col">{report.by === "model" ? "Model" : "Key"}</th>
                <th scope="col">Tokens</th>
                <th scope="col">Prompt</th>
                <th scope="col">Cached</th>
                <th scope="col">Completion</th>
              </tr>
            </thead>
            <tbody>
              {report.rows.map((row) => (
                <tr key={`${row.organizationId}-${row.keyId ?? row.group}`}>
                  {operator && <td>{row.organization}</td>}
                  <td>{row.group}</td>
                  <TokenCells row={row} />
                </tr>
              ))}
              <tr>
                {operator && <td />}
                <th scope="row">Total</th>
                <TokenCells row={report.total} />
              </tr>
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
