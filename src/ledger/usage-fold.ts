import type { Database } from "bun:sqlite";
import { bucketMs, monthOf } from "../usage-periods";

/** Adds tokens to an organization's minute: (organization_id, minute, tokens, last ended_at). */
const addToMinuteSql = `INSERT INTO usage_minutes (organization_id, minute, tokens, last_time) VALUES (?1, ?2, ?3, ?4)
  ON CONFLICT (organization_id, minute) DO UPDATE SET tokens = tokens + excluded.tokens, last_time = max(last_time, excluded.last_time)`;

/** Adds tokens to an organization's month: (organization_id, month, tokens). */
const addToMonthSql = `INSERT INTO usage_months (organization_id, month, tokens) VALUES (?1, ?2, ?3)
  ON CONFLICT (organization_id, month) DO UPDATE SET tokens = tokens + excluded.tokens`;

export interface MinuteTotal {
  organizationId: string;
  minute: number;
  tokens: number;
  /** The latest `ended_at` in this minute: the whole minute leaves the 5-hour window 5 hours after it. */
  lastTime: number;
}

export interface MonthTotal {
  organizationId: string;
  month: number;
  tokens: number;
}

/**
 * Sums ledger rows into the aggregates kept beside them (usage_minutes, usage_months), so that a batch of rows is
 * one upsert per organization and minute or month rather than one per row. Used by every ledger writer and reset.
 */
export class UsageFold {
  private readonly minutes = new Map<string, MinuteTotal>();
  private readonly months = new Map<string, MonthTotal>();

  add(organizationId: string, tokens: number, endedAt: number): void {
    if (tokens === 0) return;
    const minute = Math.floor(endedAt / bucketMs);
    const minuteEntry = this.minutes.get(`${organizationId} ${minute}`);
    if (minuteEntry) {
      minuteEntry.tokens += tokens;
      minuteEntry.lastTime = Math.max(minuteEntry.lastTime, endedAt);
    } else this.minutes.set(`${organizationId} ${minute}`, { organizationId, minute, tokens, lastTime: endedAt });
    const month = monthOf(endedAt);
    const monthEntry = this.months.get(`${organizationId} ${month}`);
    if (monthEntry) monthEntry.tokens += tokens;
    else this.months.set(`${organizationId} ${month}`, { organizationId, month, tokens });
  }

  /** In key order, so that concurrent transactions upsert the same rows in the same order and cannot deadlock. */
  minuteTotals(): MinuteTotal[] {
    return inKeyOrder(this.minutes);
  }

  monthTotals(): MonthTotal[] {
    return inKeyOrder(this.months);
  }
}

/** Adds a fold's totals to SQLite's aggregates (usage_minutes, usage_months), inside the caller's transaction. */
export function addToAggregates(sqlite: Database, fold: UsageFold): void {
  const addMinute = sqlite.query<unknown, [string, number, number, number]>(addToMinuteSql);
  const addMonth = sqlite.query<unknown, [string, number, number]>(addToMonthSql);
  for (const entry of fold.minuteTotals()) addMinute.run(entry.organizationId, entry.minute, entry.tokens, entry.lastTime);
  for (const entry of fold.monthTotals()) addMonth.run(entry.organizationId, entry.month, entry.tokens);
}

function inKeyOrder<T>(entries: Map<string, T>): T[] {
  return [...entries].sort(([left], [right]) => (left < right ? -1 : left > right ? 1 : 0)).map(([, value]) => value);
}
