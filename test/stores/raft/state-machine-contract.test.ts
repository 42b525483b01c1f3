import { storeContract } from '../../contract/store.contract.js';
import { StateMachineStore } from './state-machine-store.js';

// The whole Store contract against the Raft store's state machine, through a single-node adapter
// that encodes each call as a log command stamped with the leader's lease clock.
storeContract({
  name: 'raft state machine',
  capabilities: { renewMany: true, watch: true, streamPush: 'the state machine alone has no push; the Raft node will tell watchers from applied entries', streamClock: 'the state machine alone serves no streamHead; the node will, on the log clock' },
  open: async () => {
    const store = new StateMachineStore();
    return { store, cleanup: () => store.close() };
  },
});

// Again with the machine replaced by a restore of its own snapshot after every command: nothing
// the contract can observe (terms, fences, streams, expiry, sessions) is lost in a snapshot.
storeContract({
  name: 'raft state machine, restored from its snapshot after every command',
  capabilities: { renewMany: true, watch: true, streamPush: 'the state machine alone has no push; the Raft node will tell watchers from applied entries', streamClock: 'the state machine alone serves no streamHead; the node will, on the log clock' },
  open: async () => {
    const store = new StateMachineStore({ snapshotEach: true });
    return { store, cleanup: () => store.close() };
  },
});
