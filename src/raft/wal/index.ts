export { crc32c } from './crc32c.js';
export { DiskFullError, WalCorruptError } from './errors.js';
export { nodeFs, type WalFs } from './fs.js';
export { SnapshotFiles, type SnapshotFile } from './snapshots.js';
export { DurableStorage, type DurableStorageOptions, type Persist } from './storage.js';
export { DEFAULT_MAX_RECORD_BYTES, DEFAULT_SEGMENT_BYTES, mustSync, Wal, type WalOptions, type WalReplay } from './wal.js';
export type { SnapshotMarker } from './codec.js';
