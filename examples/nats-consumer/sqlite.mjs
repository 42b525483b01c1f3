// Open a SQLite file with better-sqlite3 where its native binding loads, else with Node's own
// node:sqlite (Node 22.5 and newer). Both serve tenure's sqliteDialect; this example uses only
// exec() and prepare(), which both have.
export async function openSqlite(file, { readonly = false } = {}) {
  try {
    const { default: Database } = await import('better-sqlite3');
    return new Database(file, { readonly });
  } catch (err) {
    try {
      const { DatabaseSync } = await import('node:sqlite');
      return new DatabaseSync(file, readonly ? { readOnly: true } : {});
    } catch {
      throw err;
    }
  }
}
