/** Whether SLUICE_DB names a PostgreSQL database (shared mode) rather than a SQLite file. */
export function isPostgresUrl(value: string | undefined): value is string {
  return value !== undefined && /^postgres(ql)?:\/\//.test(value);
}
