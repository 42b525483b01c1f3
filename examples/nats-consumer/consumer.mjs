// A fenced NATS JetStream consumer applying orders to SQLite.
//
// The consumer is where the write lands, so it is where the fence is checked: each message's
// Fencing-Token (group#term) is compared with the highest term this consumer has applied for the
// group, in the SAME SQLite transaction as the apply and the ledger's record of (term, stream
// sequence). A lower term (a deposed leader's late publish) is dropped, counted and never
// applied; a redelivery of an applied message is acknowledged without a second apply; a message
// is acknowledged only after its transaction committed.
//
//   node consumer.mjs NATS_URL STREAM DB_FILE
import { openSqlite } from './sqlite.mjs';
import { connect } from 'nats';
import { FENCED_JETSTREAM_CONSUMER, FencedConsumer, consumeFencedJetStream, sqlMessageLedger, sqliteDialect } from 'tenure/fencing';

const [natsUrl, stream, dbFile] = process.argv.slice(2);
if (!natsUrl || !stream || !dbFile) {
  console.error('usage: node consumer.mjs NATS_URL STREAM DB_FILE');
  process.exit(2);
}
const say = (event) => console.log(JSON.stringify(event));

const db = await openSqlite(dbFile);
db.exec('PRAGMA journal_mode = WAL');
db.exec('CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, publisher TEXT NOT NULL, term INTEGER NOT NULL, n INTEGER NOT NULL)');
const ledger = sqlMessageLedger(sqliteDialect, db); // table tenure_message_fences, next to `orders`
await ledger.createTable();
const insert = db.prepare('INSERT INTO orders (publisher, term, n) VALUES (?, ?, ?)');

const consumer = new FencedConsumer({
  group: 'orders',
  consumer: 'order-projector',
  ledger,
  // The apply writes through `tx`, inside the ledger's transaction.
  apply: async (_tx, msg, { token }) => {
    const { publisher, n } = msg.json();
    insert.run(publisher, token.term, n);
    say({ event: 'applied', term: token.term, publisher, n });
  },
  onSkip: (verdict, msg) => say({ event: verdict.outcome === 'stale' ? 'dropped' : verdict.outcome, reason: verdict.reason, ...msg.json() }),
});

const nc = await connect({ servers: natsUrl });
const jsm = await nc.jetstreamManager();
// Explicit acks and one message outstanding: the ledger knows a redelivery by its stream sequence.
await jsm.consumers.add(stream, { durable_name: 'order-projector', ...FENCED_JETSTREAM_CONSUMER });
// abort_on_missing_resource: a consumer deleted on the server ends the loop with an error, not a silent wait.
const messages = await (await nc.jetstream().consumers.get(stream, 'order-projector')).consume({ abort_on_missing_resource: true });
say({ event: 'ready' });

process.on('SIGTERM', () => void messages.close());
await consumeFencedJetStream(messages, consumer);
await nc.close();
db.close();
