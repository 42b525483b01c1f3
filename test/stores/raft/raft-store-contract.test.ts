import { storeContract } from '../../contract/store.contract.js';
import { RaftCluster } from './raft-cluster.js';

// The whole Store contract against the leader of a fresh 3-node embedded cluster per test: every
// write is committed by a quorum (two fdatasyncs) and every read waits for a read index.
storeContract({
  name: 'raft (embedded, 3 nodes, the leader)',
  capabilities: { renewMany: true, watch: true, streamPush: true, streamClock: true },
  // Each call is a quorum commit (two fdatasyncs) or a read index: on this loaded 2-core machine
  // two calls can be more than 50 ms apart, so a 50 ms lease lapsed between them (CI, load ~10).
  // The same floor as the raft:// client contract.
  minTtlMs: 1000,
  open: async () => {
    const cluster = await RaftCluster.start();
    cluster.stores.get(1)!.campaign(); // no need to wait an election timeout
    const store = await cluster.leader();
    return { store, cleanup: () => cluster.close() };
  },
});
