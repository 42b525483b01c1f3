// An Express service whose write is fenced by PostgreSQL.
//
// POST /payouts is written by the leader of the group `payouts` only. fence.express() reads the
// Fencing-Token header (400 malformed, 428 missing); the handler opens its transaction and calls
// guard.check(client) IN IT, before its INSERT: the guard compares the token's term with the
// highest this service has accepted for the group and records it, in the same transaction. A
// stale token throws, the transaction rolls back, fence.expressErrors() answers 409. A check
// made outside the write's transaction would not be fencing: a newer leader could write between
// the check and the write.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/tenure_example PORT=0 node service.mjs
import express from 'express';
import pg from 'pg';
import { httpFence, postgresDialect } from 'tenure/fencing';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/tenure_example';
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 8 });

await pool.query(`CREATE TABLE IF NOT EXISTS payouts (
  id bigserial PRIMARY KEY, leader text NOT NULL, term bigint NOT NULL, n integer NOT NULL, amount_cents bigint NOT NULL)`);

// The leaders' lease store is this same database (tenure_leases): the guard also refuses a term
// the store never issued. Pass leaseTable: null when the leases live elsewhere.
const fence = httpFence({ dialect: postgresDialect, group: 'payouts' });
await fence.ensureTable(pool);

const app = express();
app.use(express.json({ limit: '16kb' }));

app.post('/payouts', fence.express(), async (req, res) => {
  const guard = fence.guard(req);
  const { leader, n, amountCents } = req.body ?? {};
  if (typeof leader !== 'string' || !Number.isInteger(n) || !Number.isInteger(amountCents)) {
    res.status(400).json({ error: 'expected { leader, n, amountCents }' });
    return;
  }
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await guard.check(client); // the fence, in the write's own transaction
    const { rows } = await client.query('INSERT INTO payouts (leader, term, n, amount_cents) VALUES ($1, $2, $3, $4) RETURNING id', [leader, guard.token.term, n, amountCents]);
    await client.query('COMMIT');
    res.status(201).json({ id: Number(rows[0].id), term: guard.token.term });
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err; // Express 5 hands it to fence.expressErrors(): a stale token becomes a 409 problem
  } finally {
    client.release();
  }
});

app.use(fence.expressErrors());

const server = app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  console.log(JSON.stringify({ listening: `http://127.0.0.1:${server.address().port}` }));
});

process.on('SIGTERM', () => server.close(() => void pool.end()));
